// Inf-CL: the tiled contrastive loss against the standard one, its numerics at CLIP's largest
// scale, and the memory it keeps.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "executor/grad_cache.h"
#include "executor/plan_runner.h"
#include "models/contrastive_loss.h"
#include "models/zoo.h"
#include "runtime/memory_recorder.h"
#include "support/bfloat16_rounding.h"

namespace headroom {
namespace core {
// gtest names a precision parameter by its name.
void PrintTo(Precision precision, std::ostream* out) { *out << precision_name(precision); }
}  // namespace core

namespace {

using models::LossTiles;

struct LossAndGrads {
  double loss = 0;
  torch::Tensor dq, dk, dscale;
};

torch::Tensor unit_rows(std::int64_t batch, std::int64_t dim, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::nn::functional::normalize(torch::randn({batch, dim}, gen),
                                          torch::nn::functional::NormalizeFuncOptions().dim(1));
}

LossAndGrads run(const torch::Tensor& q0, const torch::Tensor& k0, double log_scale, std::optional<LossTiles> tiles) {
  torch::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true);
  torch::Tensor t = torch::full({}, log_scale, q0.options()).requires_grad_(true);
  torch::Tensor loss = tiles ? models::contrastive_loss_tiled(q, k, t, *tiles) : models::contrastive_loss_standard(q, k, t);
  loss.backward();
  return {loss.item<double>(), q.grad(), k.grad(), t.grad()};
}

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

void expect_equal(const LossAndGrads& tiled, const LossAndGrads& standard) {
  EXPECT_LE(std::abs(tiled.loss - standard.loss) / std::abs(standard.loss), 1e-5);
  EXPECT_LE(rel(tiled.dq, standard.dq), 1e-5);
  EXPECT_LE(rel(tiled.dk, standard.dk), 1e-5);
  EXPECT_LE(rel(tiled.dscale, standard.dscale), 1e-5);
}

TEST(InfCl, TiledLossEqualsTheStandardOneForTilesThatDoAndDoNotDivideTheBatch) {
  const auto q = unit_rows(256, 32, 1), k = unit_rows(256, 32, 2);
  const LossAndGrads standard = run(q, k, std::log(1 / 0.07), std::nullopt);
  for (const LossTiles tiles : {LossTiles{64, 64}, LossTiles{100, 37}, LossTiles{256, 256}, LossTiles{1, 255},
                                LossTiles{300, 1000}}) {
    SCOPED_TRACE(std::to_string(tiles.rows) + "x" + std::to_string(tiles.cols));
    expect_equal(run(q, k, std::log(1 / 0.07), tiles), standard);
  }
}

TEST(InfCl, ScaleOfAHundredDoesNotOverflow) {
  // Pairs in 16 tight groups: within a group (the positive and 7 negatives) scaled logits are
  // close to 100, past fp32's exp limit (~88.7), so without the running max exp(x) is inf and the
  // loss NaN; the loss stays of order log 8, so its value and gradients are not rounding noise.
  const auto groups = unit_rows(16, 16, 3).repeat({8, 1});
  const auto around = [&](std::uint64_t seed) {
    return torch::nn::functional::normalize(groups + 0.05 * unit_rows(128, 16, seed),
                                            torch::nn::functional::NormalizeFuncOptions().dim(1));
  };
  const auto q = around(4), k = around(5);
  ASSERT_GT(100 * torch::mm(q, k.t()).max().item<double>(), 88.8);
  ASSERT_TRUE(std::isinf(std::exp(100 * torch::mm(q, k.t()).max().item<float>())));
  const LossAndGrads tiled = run(q, k, std::log(100.0), LossTiles{32, 48});
  ASSERT_TRUE(std::isfinite(tiled.loss));
  ASSERT_TRUE(torch::isfinite(tiled.dq).all().item<bool>() && torch::isfinite(tiled.dk).all().item<bool>());
  // At this scale fp32 rounding of logits near 100 (an ulp is 7.6e-6) is amplified in the
  // gradients, whose terms nearly cancel: both fp32 losses are judged against the standard loss in
  // fp64, and the tiled one must be as close as the standard one (within 2x) or within 1e-5.
  const LossAndGrads exact = run(q.to(torch::kFloat64), k.to(torch::kFloat64), std::log(100.0), std::nullopt);
  const LossAndGrads standard = run(q, k, std::log(100.0), std::nullopt);
  EXPECT_LE(std::abs(tiled.loss - exact.loss) / exact.loss, 1e-5);
  const auto close = [](const torch::Tensor& t, const torch::Tensor& s, const torch::Tensor& e) {
    const double mine = rel(t.to(torch::kFloat64), e), theirs = rel(s.to(torch::kFloat64), e);
    EXPECT_LE(mine, std::max(1e-5, 2 * theirs)) << "standard fp32: " << theirs;
  };
  close(tiled.dq, standard.dq, exact.dq);
  close(tiled.dk, standard.dk, exact.dk);
  close(tiled.dscale, standard.dscale, exact.dscale);
}

TEST(InfCl, RefusesBadTilesAndShapes) {
  const auto q = unit_rows(8, 4, 1);
  const auto t = torch::zeros({});
  EXPECT_THROW(models::contrastive_loss_tiled(q, q, t, {0, 4}), std::invalid_argument);
  EXPECT_THROW(models::contrastive_loss_tiled(q, unit_rows(7, 4, 1), t, {4, 4}), std::invalid_argument);
}

// The tiled loss's peak: two tiles and O(B) vectors, never the B x B matrix.
std::int64_t loss_peak(std::int64_t batch, std::int64_t dim, std::optional<LossTiles> tiles) {
  const auto q0 = unit_rows(batch, dim, 1), k0 = unit_rows(batch, dim, 2);
  torch::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true);
  torch::Tensor t = torch::full({}, 2.0).requires_grad_(true);
  auto recorder = std::make_shared<runtime::MemoryRecorder>();
  {
    runtime::ScopedMemoryRecording recording(recorder);
    torch::Tensor loss = tiles ? models::contrastive_loss_tiled(q, k, t, *tiles) : models::contrastive_loss_standard(q, k, t);
    loss.backward();
  }
  return recorder->peak();
}

TEST(InfCl, TiledLossHoldsTilesNotTheSimilarityMatrix) {
  const std::int64_t batch = 2048, dim = 16;
  const std::int64_t standard = loss_peak(batch, dim, std::nullopt);
  const std::int64_t tiled = loss_peak(batch, dim, LossTiles{128, 128});
  EXPECT_GE(standard, 2 * batch * batch * 4);  // the logits and their gradient
  // Gradients of q and k, q~ and a few B-vectors: far below one B x B matrix.
  EXPECT_LT(tiled, 8 * batch * dim * 4 + 4 * 128 * 128 * 4 + 64 * batch);
  // Doubling the batch at fixed tiles adds O(B) bytes, not 4x.
  EXPECT_LT(loss_peak(2 * batch, dim, LossTiles{128, 128}), 2 * tiled + 1024);
}

// GradCache: micro-batched towers around the tiled loss over the whole batch give the full batch's
// standard gradient (dropout off on both sides, so both compute one function).
TEST(InfCl, GradientCacheWithTiledLossEqualsTheFullBatchStandardStep) {
  models::Model model = models::build_zoo_model("clip", {{"concepts", "64"}}, 0);
  model.set_training(true);
  model.set_dropout(false);
  const int loss = executor::contrastive_layer(model);
  ASSERT_GE(loss, 0);
  const auto sizes = std::vector<std::int64_t>{24, 24, 16};
  const auto micro = executor::make_micro_batches(model, sizes, 5, torch::kCPU);
  const auto parameters = model.parameters();

  torch::Tensor full_loss = model.forward(executor::concatenate(micro));
  full_loss.backward();
  const auto full = executor::gradients_of(parameters);
  for (const auto& p : parameters) p.mutable_grad() = torch::Tensor();

  model.layers()[static_cast<std::size_t>(loss)].contrastive->tiles = models::LossTiles{20, 28};
  executor::Position position;
  executor::PlanRunner runner(model, {0, 1}, position);  // both towers' blocks checkpointed
  const double cached_loss = executor::grad_cache_accumulate(
      model, runner, micro.size(), [&](std::size_t m) { return micro[m]; }, 64, torch::kCPU);
  EXPECT_NEAR(cached_loss, full_loss.item<double>(), 1e-5 * std::abs(full_loss.item<double>()));
  EXPECT_LE(executor::max_relative_difference(executor::gradients_of(parameters), full), 1e-5);
}

// Under autocast and under bf16 the towers run in bfloat16 and the loss in float32: the
// embeddings arrive in float32, and the loss layer on bfloat16 inputs is the float32 loss of their
// float32 values, tiled or not. A gradient-cache step with tiles is the full batch's step: set
// against the full batch run in float32 on the same weights, its gradients are no further off than
// the full batch's in the same precision (under bf16 the two round differently: a micro-batched
// bfloat16 gradient sums rounded shares, and clip's LayerNorm biases, whose shares cancel, came out
// 13% of their largest entry apart from each other while each stayed near the float32 one).
class InfClInPrecision : public ::testing::TestWithParam<core::Precision> {};

TEST_P(InfClInPrecision, TheLossRunsInFloat32AndTheGradientCacheStepsAsTheFullBatch) {
  models::Model model = models::build_zoo_model("clip", {{"concepts", "64"}}, 0);
  model.set_training(true);
  model.set_dropout(false);
  model.set_precision(GetParam());
  const int loss = executor::contrastive_layer(model);
  ASSERT_GE(loss, 0);
  const models::Layer& layer = model.layers()[static_cast<std::size_t>(loss)];
  const auto sizes = std::vector<std::int64_t>{24, 24, 16};
  const auto micro = executor::make_micro_batches(model, sizes, 5, torch::kCPU);
  {
    torch::NoGradGuard no_grad;
    const models::Batch batch = executor::concatenate(micro);
    for (const int input : layer.inputs) EXPECT_EQ(model.forward_to(batch, input).scalar_type(), torch::kFloat);
  }
  const torch::Tensor q = unit_rows(64, 32, 1).to(torch::kBFloat16), k = unit_rows(64, 32, 2).to(torch::kBFloat16);
  // The model's own log-scale (bfloat16 under bf16), as the layer reads it.
  const torch::Tensor scale = layer.parameters.at(0).detach().to(torch::kFloat);
  const double reference = models::contrastive_loss_standard(q.to(torch::kFloat), k.to(torch::kFloat), scale).item<double>();
  for (const std::optional<LossTiles> tiles : {std::optional<LossTiles>{}, std::optional<LossTiles>{LossTiles{20, 28}}}) {
    layer.contrastive->tiles = tiles;
    torch::NoGradGuard no_grad;
    const torch::Tensor value = layer.run({q, k}, model.context());
    EXPECT_EQ(value.scalar_type(), torch::kFloat);
    EXPECT_NEAR(value.item<double>(), reference, 1e-6 * std::abs(reference)) << (tiles ? "tiled" : "standard");
  }

  layer.contrastive->tiles.reset();
  const auto parameters = model.parameters();
  const auto full_batch = [&] {
    torch::Tensor value = model.forward(executor::concatenate(micro));
    EXPECT_EQ(value.scalar_type(), torch::kFloat);
    value.backward();
    std::vector<torch::Tensor> gradients;
    for (const auto& p : parameters) gradients.push_back(p.grad().to(torch::kFloat));
    for (const auto& p : parameters) p.mutable_grad() = torch::Tensor();
    return std::pair{value.item<double>(), gradients};
  };
  const auto [full_loss, full] = full_batch();
  model.set_precision(core::Precision::Fp32);
  const auto exact = full_batch().second;
  model.set_precision(GetParam());

  layer.contrastive->tiles = LossTiles{20, 28};
  executor::Position position;
  executor::PlanRunner runner(model, {0, 1}, position);
  const double cached_loss = executor::grad_cache_accumulate(
      model, runner, micro.size(), [&](std::size_t m) { return micro[m]; }, 64, torch::kCPU);
  EXPECT_NEAR(cached_loss, full_loss, 1e-5 * std::abs(full_loss));
  std::vector<torch::Tensor> cached;
  for (const auto& p : parameters) cached.push_back(p.grad().to(torch::kFloat));
  const double plan_error = executor::max_relative_difference(cached, exact);
  const double precision_error = executor::max_relative_difference(full, exact);
  std::printf("%s: the gradient cache's gradients %.3g from the float32 full batch's, the full batch's in this precision %.3g "
              "(from each other %.3g)\n",
              std::string(core::precision_name(GetParam())).c_str(), plan_error, precision_error,
              executor::max_relative_difference(cached, full));
  EXPECT_LE(plan_error, testing::bfloat16_accumulation_bound(precision_error, sizes.size()));
  EXPECT_LT(precision_error, testing::kBfloat16RoundingOnly);
  // Float32 gradients under autocast: there the two steps are no further apart than autocast's own
  // rounding takes the full batch from float32 (which kernels a CPU has decides how far that is).
  if (GetParam() == core::Precision::Bf16Autocast) {
    EXPECT_LE(executor::max_relative_difference(cached, full), precision_error);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, InfClInPrecision,
                         ::testing::Values(core::Precision::Bf16Autocast, core::Precision::Bf16),
                         [](const auto& info) {
                           return info.param == core::Precision::Bf16 ? std::string("bf16") : std::string("bf16_autocast");
                         });

// The synthetic pairs are learnable: a few Adam steps on a fixed batch take the contrastive loss
// well below its starting value (about log B: the towers start unrelated).
TEST(InfCl, ClipLearnsItsPairs) {
  models::Model model = models::build_zoo_model("clip", {{"concepts", "32"}, {"dropout", "0"}}, 0);
  model.set_training(true);
  const auto batch = model.make_batch(32, 1);
  torch::optim::Adam adam(model.parameters(), torch::optim::AdamOptions(1e-2));
  const double before = model.forward(batch).item<double>();
  double after = before;
  for (int step = 0; step < 50; ++step) {
    adam.zero_grad();
    torch::Tensor loss = model.forward(batch);
    loss.backward();
    adam.step();
    after = loss.item<double>();
  }
  EXPECT_GT(before, 0.5 * std::log(32.0));
  EXPECT_LT(after, 0.5 * before);
}

// With dropout on, each micro-batch runs again with its RNG state: the step is then the full
// batch's with the masks the first pass drew, so two runs from one RNG state agree, and the
// gradient differs from a run whose second pass draws new masks.
TEST(InfCl, GradientCacheRestoresEachMicroBatchsRngState) {
  models::Model model = models::build_zoo_model("clip", {{"concepts", "64"}, {"dropout", "0.5"}}, 0);
  model.set_training(true);
  const auto micro = executor::make_micro_batches(model, {16, 16}, 5, torch::kCPU);
  const auto parameters = model.parameters();
  executor::Position position;
  executor::PlanRunner runner(model, {}, position);
  const auto run = [&] {
    for (const auto& p : parameters) p.mutable_grad() = torch::Tensor();
    torch::manual_seed(11);
    executor::grad_cache_accumulate(model, runner, micro.size(), [&](std::size_t m) { return micro[m]; }, 32, torch::kCPU);
    return executor::gradients_of(parameters);
  };
  const auto first = run(), second = run();
  EXPECT_EQ(executor::max_relative_difference(first, second), 0.0);
  // The same step with the second pass's masks drawn afresh (no restore) is not the same gradient:
  // restoring matters.
  for (const auto& p : parameters) p.mutable_grad() = torch::Tensor();
  const int loss = executor::contrastive_layer(model);
  auto& settings = *model.layers()[static_cast<std::size_t>(loss)].contrastive;
  torch::manual_seed(11);
  settings.mode = models::ContrastiveLossSettings::Mode::Capture;
  settings.cache_rows = 32;
  for (std::size_t m = 0; m < 2; ++m) {
    torch::NoGradGuard no_grad;
    settings.offset = 16 * static_cast<std::int64_t>(m);
    model.forward(micro[m]);
  }
  torch::Tensor q = settings.cached_q.requires_grad_(true), k = settings.cached_k.requires_grad_(true);
  settings.mode = models::ContrastiveLossSettings::Mode::Loss;
  models::contrastive_loss_standard(q, k, model.layers()[static_cast<std::size_t>(loss)].parameters[0]).backward();
  settings.cached_q = q.grad();
  settings.cached_k = k.grad();
  settings.mode = models::ContrastiveLossSettings::Mode::Surrogate;
  for (std::size_t m = 0; m < 2; ++m) {
    settings.offset = 16 * static_cast<std::int64_t>(m);
    model.forward(micro[m]).backward();
  }
  settings.mode = models::ContrastiveLossSettings::Mode::Loss;
  settings.cached_q = settings.cached_k = torch::Tensor();
  EXPECT_GT(executor::max_relative_difference(executor::gradients_of(parameters), first), 1e-3);
}

}  // namespace
}  // namespace headroom

