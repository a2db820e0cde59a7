#include <gtest/gtest.h>

#include "core/errors.h"
#include "core/known_names.h"
#include "models/zoo.h"
#include "runtime/memory_recorder.h"
#include "support/small_zoo.h"

namespace headroom {
namespace {

using core::InputError;

using testing::kSmall;

TEST(Zoo, EveryModelTrainsOneStep) {
  ASSERT_EQ(models::zoo().size(), kSmall.size());
  for (const auto& entry : models::zoo()) {
    SCOPED_TRACE(entry.name);
    models::Model model = models::build_zoo_model(entry.name, kSmall.at(entry.name), 1);
    const models::Batch batch = model.make_batch(3, 11);
    EXPECT_EQ(batch.size(), 3);
    torch::Tensor loss = model.forward(batch);
    ASSERT_EQ(loss.dim(), 0);
    EXPECT_TRUE(std::isfinite(loss.item<float>()));
    loss.backward();
    for (const auto& p : model.parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_TRUE(p.grad().isfinite().all().item<bool>());
    }
    // Every layer's parameters are the model's, and no parameter is left out of a layer.
    std::int64_t layer_params = 0;
    for (const auto& layer : model.layers()) {
      for (const auto& p : layer.parameters) layer_params += p.numel() * p.element_size();
    }
    EXPECT_EQ(layer_params, model.parameter_bytes());
    EXPECT_EQ(model.layers().back().kind, entry.name == "clip" ? "contrastive_loss" : "loss");
    // The trace reader refuses a zoo trace's layer kind it does not know (core/known_names.h).
    for (const auto& layer : model.layers()) EXPECT_TRUE(core::is_known(core::kZooLayerKinds, layer.kind)) << layer.kind;
  }
}

// The size a model's settings are checked by before it is built is the model's own: every
// parameter, and what the model builds besides, counted exactly, at small sizes and at presets.
TEST(Zoo, SizeEstimateIsTheBuiltModels) {
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> configs(kSmall.begin(), kSmall.end());
  configs.push_back({"mlp", {}});
  configs.push_back({"cnn", {{"stages", "4"}, {"blocks", "2"}, {"channels", "3"}}});
  configs.push_back({"bert", {{"preset", "mini"}, {"ffn", "300"}, {"classes", "5"}}});
  configs.push_back({"gpt", {{"preset", "mini"}, {"seq", "64"}}});
  configs.push_back({"clip", {{"channels", "3"}, {"layers", "2"}, {"dim", "48"}}});
  for (const auto& [name, overrides] : configs) {
    SCOPED_TRACE(name);
    const models::ZooEntry& entry = models::find_zoo_entry(name);
    const models::Config config = models::resolve_config(name, entry.keys, entry.presets, overrides);
    const models::SizeEstimate size = entry.estimate(config);
    models::Model model = models::build_zoo_model(name, overrides);
    EXPECT_EQ(static_cast<std::int64_t>(size.parameters) * 4, model.parameter_bytes());
    EXPECT_EQ(static_cast<std::int64_t>(size.built_bytes), model.extra_resident_bytes());
  }
}

TEST(Zoo, ModelsAreBlockStructured) {
  const models::Model bert = models::build_zoo_model("bert", kSmall.at("bert"));
  EXPECT_EQ(bert.block_count(), 2);
  const models::Model cnn = models::build_zoo_model("cnn", kSmall.at("cnn"));
  EXPECT_EQ(cnn.block_count(), 2);
  // GELU, LayerNorm and the attention core are layers of their own.
  std::set<std::string> kinds;
  for (const auto& layer : bert.layers()) kinds.insert(layer.kind);
  for (const char* kind : {"gelu", "layernorm", "attention", "dropout", "add", "linear", "embedding", "loss"}) {
    EXPECT_TRUE(kinds.contains(kind)) << kind;
  }
  // Residual adds read the block input (a skip edge), not only the previous layer.
  bool skip = false;
  for (std::size_t i = 0; i < bert.layers().size(); ++i) {
    for (const int input : bert.layers()[i].inputs) skip |= input >= 0 && input + 1 < static_cast<int>(i);
  }
  EXPECT_TRUE(skip);
}

TEST(Zoo, InitialisationAndBatchesAreDeterministic) {
  const auto a = models::build_zoo_model("gpt", kSmall.at("gpt"), 5);
  const auto b = models::build_zoo_model("gpt", kSmall.at("gpt"), 5);
  const auto c = models::build_zoo_model("gpt", kSmall.at("gpt"), 6);
  const auto pa = a.parameters(), pb = b.parameters(), pc = c.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  bool any_differs = false;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(pa[i].equal(pb[i]));
    any_differs |= !pa[i].equal(pc[i]);
  }
  EXPECT_TRUE(any_differs);
  EXPECT_TRUE(a.make_batch(4, 9).input.equal(b.make_batch(4, 9).input));
  EXPECT_FALSE(a.make_batch(4, 9).input.equal(a.make_batch(4, 10).input));
}

TEST(Zoo, GptTargetIsTheNextToken) {
  const auto gpt = models::build_zoo_model("gpt", kSmall.at("gpt"));
  const auto batch = gpt.make_batch(2, 3);
  EXPECT_TRUE(batch.input.slice(1, 1).equal(batch.target.slice(1, 0, -1)));
}

TEST(Zoo, TargetsAreLearnable) {
  // The synthetic task is a real one: a few Adam steps on a fixed batch cut the loss sharply.
  auto model = models::build_zoo_model("mlp", kSmall.at("mlp"), 0);
  const auto batch = model.make_batch(64, 1);
  torch::optim::Adam adam(model.parameters(), torch::optim::AdamOptions(1e-2));
  const float first = model.forward(batch).item<float>();
  float last = first;
  for (int i = 0; i < 40; ++i) {
    adam.zero_grad();
    torch::Tensor loss = model.forward(batch);
    loss.backward();
    adam.step();
    last = loss.item<float>();
  }
  EXPECT_LT(last, 0.3f * first);
}

TEST(ZooConfig, PresetsAndOverrides) {
  const auto& bert = models::find_zoo_entry("bert");
  const auto base = models::resolve_config("bert", bert.keys, bert.presets, {{"preset", "base"}});
  EXPECT_EQ(base.positive_int("layers"), 12);
  EXPECT_EQ(base.positive_int("hidden"), 768);
  const auto large_short =
      models::resolve_config("bert", bert.keys, bert.presets, {{"preset", "large"}, {"seq", "512"}, {"layers", "2"}});
  EXPECT_EQ(large_short.positive_int("hidden"), 1024);
  EXPECT_EQ(large_short.positive_int("layers"), 2);
  EXPECT_EQ(large_short.positive_int("seq"), 512);
}

TEST(ZooConfig, BadInputIsNamed) {
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] { models::build_zoo_model("resnet9000", {}); }),
            "unknown model 'resnet9000' (known: mlp, cnn, bert, gpt, clip)");
  EXPECT_NE(message([] { models::build_zoo_model("mlp", {{"width", "3"}}); }).find("unknown key 'width'"),
            std::string::npos);
  EXPECT_EQ(message([] { models::build_zoo_model("mlp", {{"depth", "two"}}); }),
            "model mlp: key 'depth' expects a non-negative integer, got 'two'");
  EXPECT_EQ(message([] { models::build_zoo_model("mlp", {{"depth", "0"}}); }), "model mlp: key 'depth' must be positive, got 0");
  EXPECT_NE(message([] { models::build_zoo_model("bert", {{"preset", "huge"}}); }).find("unknown preset 'huge'"),
            std::string::npos);
  EXPECT_NE(message([] { models::build_zoo_model("bert", {{"dropout", "1.5"}}); }).find("probability"),
            std::string::npos);
  EXPECT_NE(message([] { models::build_zoo_model("gpt", {{"hidden", "30"}, {"heads", "4"}}); }).find("divisible"),
            std::string::npos);
  EXPECT_EQ(message([] { models::parse_setting("depth"); }), "setting: expected key=value, got 'depth'");
}

// Every GELU, LayerNorm and attention of bert and gpt switched to Tempo's variant computes the same
// loss and, up to GELU's recovered derivative, the same gradients; it keeps fewer bytes.
TEST(ZooTempo, TempoLayersComputeTheSameStepAndKeepLess) {
  for (const std::string name : {"bert", "gpt"}) {
    SCOPED_TRACE(name);
    auto model = models::build_zoo_model(name, {{"preset", "tiny"}}, 3);
    model.set_training(true);
    model.set_dropout(false);  // the two variants draw their dropout masks differently
    int tempo_capable = 0;
    for (const auto& layer : model.layers()) {
      if (layer.has_tempo_variant()) {
        ++tempo_capable;
        EXPECT_TRUE(layer.kind == "gelu" || layer.kind == "layernorm" || layer.kind == "attention") << layer.kind;
      }
    }
    EXPECT_GE(tempo_capable, 3 * model.block_count());
    EXPECT_THROW(model.set_variant(0, core::LayerVariant::Tempo), std::invalid_argument);  // the embedding has no Tempo variant

    const auto batch = model.make_batch(3, 11);
    const auto run = [&](bool tempo, std::int64_t& kept) {
      model.set_all_variants(tempo ? core::LayerVariant::Tempo : core::LayerVariant::Standard);
      for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
      auto recorder = std::make_shared<runtime::MemoryRecorder>();
      torch::Tensor loss;
      {
        runtime::ScopedMemoryRecording recording(recorder);
        loss = model.forward(batch);
        kept = recorder->allocated();
      }
      loss.backward();
      std::vector<torch::Tensor> grads;
      for (const auto& p : model.parameters()) grads.push_back(p.grad().flatten().clone());
      return std::make_pair(loss.item<double>(), torch::cat(grads));
    };
    std::int64_t kept_standard = 0, kept_tempo = 0;
    const auto [loss_standard, grad_standard] = run(false, kept_standard);
    const auto [loss_tempo, grad_tempo] = run(true, kept_tempo);
    EXPECT_NEAR(loss_tempo, loss_standard, 1e-6 * std::abs(loss_standard));
    EXPECT_LT((grad_tempo - grad_standard).norm().item<double>() / grad_standard.norm().item<double>(), 1e-5);
    EXPECT_LT(kept_tempo, kept_standard);
    std::printf("%s tiny, batch 3: kept after forward %lld B standard, %lld B Tempo\n", name.c_str(),
                static_cast<long long>(kept_standard), static_cast<long long>(kept_tempo));
  }
}

// With dropout on, the Tempo attention draws its own mask and still trains.
TEST(ZooTempo, TempoModelTrainsWithDropout) {
  auto model = models::build_zoo_model("bert", {{"preset", "tiny"}}, 4);
  model.set_training(true);
  model.set_all_variants(core::LayerVariant::Tempo);
  auto loss = model.forward(model.make_batch(2, 5));
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
}

}  // namespace
}  // namespace headroom
