// A user's own TorchScript module (models/torchscript_model.h): profiled, planned and executed like
// a zoo model, and every malformed module or flag refused with one line. The modules are scripted
// in C++ (tests/support/torchscript_modules.h), so these tests need no Python.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "cli/profile_command.h"
#include "core/errors.h"
#include "executor/executor.h"
#include "executor/plan_runner.h"
#include "models/model_source.h"
#include "models/torchscript_model.h"
#include "planner/layer_graph.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "profiler/profiler.h"
#include "runtime/memory_recorder.h"
#include "support/input_error.h"
#include "support/torchscript_modules.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

using testing::dense;
using testing::error_of;
using testing::features_input;
using testing::gradient_difference;
using testing::head;
using testing::residual_network;
using testing::save_module;
using testing::scripted;

// BatchNorm over features, named so headroom recognises it.
torch::jit::Module batchnorm(std::int64_t features) {
  torch::jit::Module m = scripted("MyBatchNorm1d");
  m.register_parameter("weight", torch::ones({features}, torch::requires_grad()), false);
  m.register_parameter("bias", torch::zeros({features}, torch::requires_grad()), false);
  m.register_buffer("running_mean", torch::zeros({features}));
  m.register_buffer("running_var", torch::ones({features}));
  m.define("def forward(self, x):\n"
           "    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var, self.training, "
           "0.1, 1e-5, False)\n");
  return m;
}

const char* kChainForward =
    "def forward(self, x):\n"
    "    x = self.fc1.forward(x)\n"
    "    x = self.fc2.forward(x)\n"
    "    return self.out.forward(x)\n";

fs::path mlp_chain(double dropout = 0) {
  torch::manual_seed(1);
  return save_module("mlp.pt", {{"fc1", dense("A", 8, 16, dropout)}, {"fc2", dense("B", 16, 16, dropout)}, {"out", head(16, 5)}},
                     kChainForward);
}

TEST(TorchScriptModel, ChildrenBecomeLayersAndTheLossIsAdded) {
  const fs::path path = mlp_chain();
  auto recorder = std::make_shared<runtime::MemoryRecorder>();
  std::optional<runtime::ScopedMemoryRecording> recording(recorder);
  models::Model model = models::load_torchscript_model(path.string(), features_input(), 0);
  // Everything loading leaves allocated is accounted for (the module's debug records besides its
  // parameters), and a recorder around the load still sees all of it.
  EXPECT_GT(model.extra_resident_bytes(), 0);
  EXPECT_EQ(recorder->allocated(), model.parameter_bytes() + model.extra_resident_bytes());
  recording.reset();
  ASSERT_EQ(model.layers().size(), 4u);
  EXPECT_EQ(model.layers()[0].name, "fc1");
  EXPECT_EQ(model.layers()[2].name, "out");
  EXPECT_EQ(model.layers()[3].name, "loss");
  EXPECT_EQ(model.layers()[1].block, 1);
  EXPECT_EQ(model.config().values().at("target"), "scalar:int64:0-5");  // classes from the output
  EXPECT_EQ(model.config().values().at("depth"), "1");  // what rebuilds the same layers
  EXPECT_EQ(model.parameters().size(), 5u);

  // What the trace records rebuilds the same model; a changed file is refused.
  const models::ModelSource source = models::model_source(model);
  ASSERT_TRUE(source.file);
  EXPECT_EQ(source.file->sha256.size(), 64u);
  const models::Model again = models::build_model(source, 0);
  const auto batch = model.make_batch(3, 7);
  EXPECT_TRUE(torch::equal(batch.input, again.make_batch(3, 7).input));
  EXPECT_TRUE(torch::allclose(model.forward(batch), again.forward(batch)));
  { std::ofstream(path, std::ios::app) << "x"; }
  EXPECT_NE(error_of([&] { models::build_model(source, 0); }).find("has changed since the trace was recorded"),
            std::string::npos);
  fs::remove(path);
}

TEST(TorchScriptModel, MicroBatchedCheckpointedGradientsEqualTheFullBatch) {
  const fs::path path = mlp_chain(0.3);
  EXPECT_LT(gradient_difference(path, {5, 4, 3}, {0, 1}, false), 1e-5);
  // Dropout inside the module: a checkpointed child draws the same masks when it runs again.
  EXPECT_LT(gradient_difference(path, {6, 6}, {0, 1}, true), 1e-5);
  fs::remove(path);
}

TEST(TorchScriptModel, RecomputingACheckpointedBatchNormLeavesItsStatisticsAsOneRunWould) {
  torch::manual_seed(2);
  const fs::path path = save_module("bn.pt", {{"fc1", dense("A", 8, 16)}, {"bn", batchnorm(16)}, {"out", head(16, 5)}},
                                    "def forward(self, x):\n    return self.out.forward(self.bn.forward(self.fc1.forward(x)))\n");
  const auto running_mean = [&](const std::vector<int>& checkpointed) {
    models::Model model = models::load_torchscript_model(path.string(), features_input(), 0);
    EXPECT_NE(model.layers()[1].kind.find("batchnorm"), std::string::npos);
    executor::Position position;
    executor::PlanRunner runner(model, checkpointed, position);
    runner.accumulate(executor::make_micro_batches(model, {4, 4}, 5, torch::kCPU), 8);
    return model.buffers()[0].clone();
  };
  const torch::Tensor stored = running_mean({});
  EXPECT_GT(stored.abs().max().item<double>(), 0);  // the statistics moved
  EXPECT_TRUE(torch::allclose(running_mean({1}), stored, 1e-6, 1e-7));
  fs::remove(path);
}

// A module's layers are opaque to the planner (many autograd nodes each, BatchNorm recomputed on
// copies of its buffers): the profiler's checkpointed pass measures each as a checkpointed block
// of its own, and a checkpointed block at any position, and adjacent ones, is predicted at or
// above what runs and within 1% of it. Without the pass, the rules for opaque layers put this
// narrow module 28-32% above.
TEST(TorchScriptModel, CheckpointedBlocksArePredictedWithinOnePercentAboveWhatRuns) {
  torch::manual_seed(3);
  const fs::path path = save_module(
      "bn-chain.pt", {{"fc1", dense("A", 8, 4096)}, {"bn", batchnorm(4096)}, {"fc2", dense("B", 4096, 16)}, {"out", head(16, 5)}},
      "def forward(self, x):\n    return self.out.forward(self.fc2.forward(self.bn.forward(self.fc1.forward(x))))\n");
  models::Model model = models::load_torchscript_model(path.string(), features_input(), 0);
  profiler::ProfileOptions options;
  options.batch_sizes = {2, 8, 32, 64};  // BatchNorm needs two samples
  options.repeats = 1;
  const core::Trace trace = profiler::profile(model, options);
  for (const auto& layer : trace.layers) {
    EXPECT_EQ(layer.checkpointed.size(), layer.kind == "loss" ? 0u : options.batch_sizes.size()) << layer.name;
  }
  // A trace from before the pass: the rules for opaque layers, a bound.
  core::Trace unmeasured = trace;
  for (auto& layer : unmeasured.layers) layer.checkpointed.clear();
  const core::CostModel unmeasured_costs(unmeasured);
  const planner::LayerGraph graph(trace);
  const core::CostModel costs(trace);
  planner::PlanRequest request;
  request.global_batch = 128;
  request.budget_bytes = std::int64_t{1} << 40;
  request.strategies = {};
  const auto outcome = planner::plan_step(trace, request);
  ASSERT_TRUE(outcome.plan);
  for (const std::vector<int>& blocks : std::vector<std::vector<int>>{{0}, {1}, {2}, {1, 2}, {0, 1, 2, 3}}) {
    core::Plan plan = *outcome.plan;
    core::StepChoice choice;
    choice.micro_batches = {64, 64};  // activations (1 MiB a layer) above the optimizer's temporaries
    choice.checkpointed_blocks = blocks;
    plan.choice = planner::complete_choice(trace, graph, choice);
    plan.predicted.peak_bytes = planner::predict_step(costs, graph, plan.choice).peak_bytes;
    executor::ExecuteOptions run;
    run.steps = 2;
    run.enforce_budget = false;
    run.gradient_check = false;
    const core::Report report = executor::execute(plan, trace, "p.json", run);
    ASSERT_EQ(report.status, "ok");
    const auto measured = static_cast<double>(report.measured.peak_bytes);
    EXPECT_GE(static_cast<double>(plan.predicted.peak_bytes), measured) << "blocks " << ::testing::PrintToString(blocks);
    EXPECT_LE(static_cast<double>(plan.predicted.peak_bytes), 1.01 * measured) << "blocks " << ::testing::PrintToString(blocks);
    EXPECT_GE(static_cast<double>(planner::predict_step(unmeasured_costs, graph, plan.choice).peak_bytes), measured);
  }
  fs::remove(path);
}

TEST(TorchScriptModel, ProfilesPlansAndExecutesUnderABudget) {
  const fs::path path = mlp_chain(0.1);
  models::Model model = models::load_torchscript_model(path.string(), features_input(), 0);
  profiler::ProfileOptions options;
  options.batch_sizes = {1, 2, 4, 8};
  options.repeats = 1;
  const core::Trace trace = profiler::profile(model, options);
  ASSERT_TRUE(trace.model.file);
  EXPECT_EQ(trace.model.name, path.stem().string());
  EXPECT_FALSE(trace.has_tempo());

  planner::PlanRequest request;
  request.global_batch = 32;
  request.budget_bytes = 1;
  request.strategies.insert(planner::Strategy::Tempo);
  const auto least = planner::plan_step(trace, request).smallest_budget;
  ASSERT_GT(least, 0);
  request.budget_bytes = least * 11 / 10;
  const auto outcome = planner::plan_step(trace, request);
  ASSERT_TRUE(outcome.plan);
  EXPECT_GT(outcome.plan->choice.micro_batches.size(), 1u);
  bool tempo_note = false;
  for (const auto& w : outcome.plan->warnings) tempo_note |= w.find("Tempo does not apply") != std::string::npos;
  EXPECT_TRUE(tempo_note);

  executor::ExecuteOptions run;
  run.steps = 2;
  const core::Report report = executor::execute(*outcome.plan, trace, "p.json", run);
  ASSERT_EQ(report.status, "ok");
  EXPECT_LE(report.measured.peak_bytes, outcome.plan->budget_bytes);
  ASSERT_TRUE(report.gradient_check.computed);
  EXPECT_LT(report.gradient_check.max_rel_diff, 1e-5);

  // The whole batch at the same budget runs out inside the module; the interpreter's wrapping of
  // the refusal still reads as running out, at a named layer.
  core::Plan whole = *outcome.plan;
  whole.choice = whole.choice.with_micro_batches({32});
  whole.choice.checkpointed_blocks.clear();
  for (auto& layer : whole.choice.layers) layer.checkpoint = false;
  run.gradient_check = false;
  const core::Report refused = executor::execute(whole, trace, "p.json", run);
  ASSERT_EQ(refused.status, "out_of_memory");
  EXPECT_FALSE(refused.out_of_memory->layer.empty());
  EXPECT_GT(refused.out_of_memory->requested_bytes, 0);
  fs::remove(path);
}

// One trace of several precisions holds them at the same sizes: where one precision's scratch steps
// (here a workspace the module takes in bfloat16 from 12 samples on) and the sizes that locate it
// are profiled in that precision, the others are profiled at them too, and the trace reads back.
TEST(TorchScriptModel, PrecisionsInOneTraceShareTheSizesOneOfThemLocated) {
  torch::manual_seed(1);
  torch::jit::Module mid = scripted("Workspace");
  mid.define("def forward(self, x):\n"
             "    if x.element_size() == 2 and x.size(0) >= 12:\n"
             "        x = x + torch.zeros([16384]).sum()\n"
             "    return torch.relu(x)\n");
  const fs::path path = save_module("workspace.pt", {{"fc1", dense("A", 8, 16)}, {"mid", mid}, {"out", head(16, 5)}},
                                    "def forward(self, x):\n"
                                    "    x = self.fc1.forward(x)\n"
                                    "    x = self.mid.forward(x)\n"
                                    "    return self.out.forward(x)\n");
  cli::ProfileArgs args;
  args.torchscript = path.string();
  args.inputs = {"8:float32"};
  args.depth = "1";
  args.batch_sizes = "1,2,4,8,16,32";
  args.precision = "fp32,bf16";
  args.options.repeats = 1;
  args.options.calibrate = false;
  std::optional<profiler::GpuStepRecord> gpu_step;
  const core::Trace trace = cli::run_profile(args, gpu_step);
  const std::vector<std::int64_t> sizes{1, 2, 4, 8, 10, 11, 12, 16, 32};
  EXPECT_EQ(trace.batch_sizes, sizes);
  ASSERT_EQ(trace.other_precisions.size(), 1u);
  EXPECT_EQ(trace.other_precisions[0].precision, core::Precision::Bf16);
  EXPECT_EQ(trace.other_precisions[0].batch_sizes, sizes);
  EXPECT_EQ(core::trace_from_json(core::to_json(trace)), trace);
  fs::remove(path);
}

// Per-pixel class scores [N, 5, 4, 4]: cross-entropy reads the classes along dimension 1, as
// PyTorch's does, or the last where the config says so; a config from before class_dim (a trace
// recorded then) reads the last, as it was measured.
TEST(TorchScriptModel, CrossEntropyTakesItsClassesWherePyTorchDoes) {
  torch::jit::Module pixels = scripted("Pixels");
  pixels.register_parameter("w", torch::randn({5, 3, 1, 1}).requires_grad_(), false);
  pixels.define("def forward(self, x):\n    return torch.conv2d(x, self.w)\n");
  torch::jit::Module mix = scripted("Mix");
  mix.register_parameter("w", torch::randn({5, 5, 1, 1}).requires_grad_(), false);
  mix.define("def forward(self, x):\n    return torch.conv2d(x, self.w)\n");
  const fs::path path = save_module("pixels.pt", {{"pixels", pixels}, {"mix", mix}},
                                    "def forward(self, x):\n    return self.mix.forward(self.pixels.forward(x))\n");
  const std::map<std::string, std::string> input{{"input", "3x4x4:float32"}, {"depth", "1"}};
  auto with = [&](const std::map<std::string, std::string>& more) {
    auto config = input;
    config.insert(more.begin(), more.end());
    return models::load_torchscript_model(path.string(), config, 0);
  };
  const models::Model dim1 = with({{"class_dim", "1"}});
  EXPECT_EQ(dim1.config().values().at("target"), "4x4:int64:0-5");
  const models::Batch batch = dim1.make_batch(3, 1);
  const torch::Tensor scores = dim1.forward_to(batch, 1);
  EXPECT_TRUE(torch::allclose(dim1.forward(batch), torch::cross_entropy_loss(scores, batch.target)));
  EXPECT_EQ(with({{"class_dim", "last"}}).config().values().at("target"), "5x4:int64:0-4");
  const models::Model older = with({});
  EXPECT_EQ(older.config().values().at("target"), "5x4:int64:0-4");
  EXPECT_EQ(older.config().values().at("class_dim"), "last");
  EXPECT_EQ(error_of([&] { with({{"class_dim", "2"}}); }),
            "class_dim: expected 1 (PyTorch's, [N, C, d1, ...]) or last ([N, T, V]), got '2'");
  EXPECT_EQ(error_of([&] { with({{"class_dim", "1"}, {"loss", "mse"}}); }),
            "class_dim: only cross-entropy has classes, and the loss is mse");
  fs::remove(path);
}

// A module's own requires_grad flags are read as they are, --freeze patterns name its parameters
// by path, and both come back when the trace's source is rebuilt.
TEST(TorchScriptModel, FrozenParametersAreTheModulesOwnAndThePatterns) {
  torch::manual_seed(1);
  torch::jit::Module fc1 = dense("A", 8, 16);
  for (auto p : fc1.parameters()) p.set_requires_grad(false);
  const fs::path path = save_module("frozen.pt", {{"fc1", fc1}, {"fc2", dense("B", 16, 16)}, {"out", head(16, 5)}},
                                    kChainForward);
  models::Model model = models::load_torchscript_model(path.string(), features_input(), 0);
  EXPECT_EQ(model.trainable_parameters().size(), model.parameters().size() - 2);
  model.freeze({"fc2"});
  EXPECT_EQ(model.trainable_parameters().size(), model.parameters().size() - 4);
  const models::Model again = models::build_model(models::model_source(model), 0);
  EXPECT_EQ(again.trainable_parameters().size(), model.trainable_parameters().size());
  EXPECT_EQ(again.freeze_patterns(), (std::vector<std::string>{"fc2"}));
  models::Model other = models::load_torchscript_model(path.string(), features_input(), 0);
  EXPECT_EQ(error_of([&] { other.freeze({"fc9"}); }).rfind("--freeze: 'fc9' names no parameter of ", 0), 0u);
  EXPECT_NE(error_of([&] { other.freeze({"fc2", "out"}); }).find("leaves no parameter of"), std::string::npos);
  fs::remove(path);
}

TEST(TorchScriptModel, MalformedModulesAreRefusedWithOneLine) {
  const auto refuse = [](const fs::path& path, const std::map<std::string, std::string>& config) {
    const std::string message = error_of([&] { models::load_torchscript_model(path.string(), config, 0); });
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  };
  const fs::path text = fs::temp_directory_path() / ("headroom-ts-" + std::to_string(::getpid()) + "-text.pt");
  { std::ofstream(text) << "not a model"; }
  EXPECT_NE(refuse(text, features_input()).find("is not a TorchScript module"), std::string::npos);
  fs::remove(text);
  EXPECT_NE(refuse(fs::temp_directory_path() / "headroom-no-such.pt", features_input()).find("no such file"), std::string::npos);

  torch::jit::Module lone = scripted("Lone");
  lone.register_parameter("w", torch::ones({8, 8}), false);
  lone.define("def forward(self, x):\n    return torch.matmul(x, self.w)\n");
  const fs::path childless = fs::temp_directory_path() / ("headroom-ts-" + std::to_string(::getpid()) + "-lone.pt");
  lone.save(childless.string());
  EXPECT_NE(refuse(childless, features_input()).find("calls no submodule"), std::string::npos);
  fs::remove(childless);

  const fs::path chain = mlp_chain();
  EXPECT_NE(refuse(chain, {{"input", "8:float32"}, {"layers", "fc1,nope,out"}}).find("'nope' is not a submodule"),
            std::string::npos);
  EXPECT_NE(refuse(chain, {{"input", "8:float32"}, {"layers", "fc1,fc1"}}).find("'fc1' is named twice"), std::string::npos);
  EXPECT_NE(refuse(chain, {{"input", "9:float32"}}).find("fails on a batch of 2 samples of 9:float32"), std::string::npos);
  EXPECT_NE(refuse(chain, {{"input", "8:float32"}, {"target", "3:int64:0-5"}}).find("the loss (cross-entropy) fails"),
            std::string::npos);
  EXPECT_NE(refuse(chain, {{"input", "8:float32"}, {"loss", "model"}}).find("must return the loss"), std::string::npos);
  for (const std::string depth : {"0", "17", "x", "-1"}) {
    EXPECT_NE(refuse(chain, {{"input", "8:float32"}, {"depth", depth}}).find("depth: '" + depth + "' is not a depth"),
              std::string::npos) << depth;
  }
  EXPECT_NE(refuse(chain, {{"input", "8:float32"}, {"depth", "1"}, {"layers", "fc1"}}).find("not both"), std::string::npos);
  EXPECT_NE(refuse(chain, {{"input", "8:float32"}, {"colour", "red"}}).find("'colour' is not a TorchScript model setting"),
            std::string::npos);
  EXPECT_NE(refuse(chain, {}).find("input: give the input's shape"), std::string::npos);
  fs::remove(chain);

  // A layer whose running depends on the data: no fixed list of layers.
  torch::manual_seed(1);
  const fs::path branch = save_module("branch.pt", {{"fc1", dense("A", 8, 8)}, {"fc2", dense("B", 8, 8)}},
                                      "def forward(self, x):\n"
                                      "    x = self.fc1.forward(x)\n"
                                      "    if bool(x.sum() > 0):\n"
                                      "        x = self.fc2.forward(x)\n"
                                      "    return x\n");
  const std::string in_if = refuse(branch, features_input());
  EXPECT_NE(in_if.find("forward calls fc2 inside an if"), std::string::npos) << in_if;
  fs::remove(branch);

  // What passes between layers is a tensor.
  torch::jit::Module splitter = scripted("Splitter");
  splitter.define("def forward(self, x):\n    return (x, x * 2)\n");
  torch::manual_seed(1);
  const fs::path tuple = save_module("tuple.pt", {{"split", splitter}, {"fc", dense("A", 8, 8)}},
                                     "def forward(self, x):\n"
                                     "    a, b = self.split.forward(x)\n"
                                     "    return self.fc.forward(a + b)\n");
  const std::string handed = refuse(tuple, features_input());
  EXPECT_NE(handed.find("split hands a Tuple[Tensor, Tensor] to later layers"), std::string::npos) << handed;
  // Named as one layer with what reads it, it runs.
  EXPECT_NO_THROW(models::load_torchscript_model(tuple.string(), {{"input", "8:float32"}, {"layers", "fc"}}, 0));
  fs::remove(tuple);

  const fs::path nested = residual_network();
  EXPECT_NE(refuse(nested, {{"input", "8:float32"}, {"layers", "stage,stage.0"}}).find("are both named"), std::string::npos);
  EXPECT_NE(refuse(nested, {{"input", "8:float32"}, {"layers", "stem,head.unused"}}).find("is not a submodule"),
            std::string::npos);
  fs::remove(nested);
}

}  // namespace
}  // namespace headroom
