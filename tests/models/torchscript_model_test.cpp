// A user's own TorchScript module: cut into layers at its submodule calls, profiled, planned and
// executed like a zoo model, and every malformed module or flag refused with one line. The modules
// are scripted here in C++ (torch::jit::Module::define), so these tests need no Python.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>
#include <fstream>
#include <set>

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
#include "support/runs_as_predicted.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

// What torch.jit.script gives every nn.Module and C++ modules lack.
torch::jit::Module scripted(const std::string& type) {
  torch::jit::Module m("__torch__." + type);
  m.register_attribute("training", c10::BoolType::get(), true);
  return m;
}

// A linear layer with ReLU, optionally dropout, as its own TorchScript class.
torch::jit::Module dense(const std::string& type, std::int64_t in, std::int64_t out, double dropout = 0) {
  torch::jit::Module m = scripted(type);
  m.register_parameter("weight", (torch::randn({out, in}) / std::sqrt(static_cast<double>(in))).requires_grad_(), false);
  m.register_parameter("bias", torch::zeros({out}, torch::requires_grad()), false);
  m.define("def forward(self, x):\n"
           "    y = torch.relu(torch.matmul(x, self.weight.t()) + self.bias)\n"
           "    return torch.dropout(y, " + std::to_string(dropout) + ", self.training)\n");
  return m;
}

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

torch::jit::Module head(std::int64_t in, std::int64_t classes) {
  torch::jit::Module m = scripted("Head");
  m.register_parameter("weight", (torch::randn({classes, in}) / std::sqrt(static_cast<double>(in))).requires_grad_(), false);
  m.define("def forward(self, x):\n    return torch.matmul(x, self.weight.t())\n");
  return m;
}

// Children registered in order and a forward given as source.
fs::path save_module(const std::string& file, const std::vector<std::pair<std::string, torch::jit::Module>>& children,
                     const std::string& forward) {
  torch::jit::Module root = scripted("Chain");
  for (const auto& [name, child] : children) root.register_module(name, child);
  root.define(forward);
  const fs::path path = fs::temp_directory_path() / ("headroom-ts-" + std::to_string(::getpid()) + "-" + file);
  root.save(path.string());
  return path;
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

// A small residual network written as one would in PyTorch: a helper method, blocks of their own
// class with a skip connection, a flatten before the head.
torch::jit::Module residual_block(const std::string& type, std::int64_t width) {
  torch::jit::Module m = scripted(type);
  m.register_module("fc1", dense(type + "A", width, width));
  m.register_module("fc2", dense(type + "B", width, width));
  m.define("def forward(self, x):\n"
           "    y = self.fc2.forward(self.fc1.forward(x))\n"
           "    return torch.relu(y + x)\n");
  return m;
}

fs::path residual_network() {
  torch::manual_seed(5);
  torch::jit::Module stage = scripted("Stage");
  stage.register_module("0", residual_block("Res0", 16));
  stage.register_module("1", residual_block("Res1", 16));
  stage.define("def forward(self, x):\n"
               "    x = getattr(self, '0').forward(x)\n"
               "    return getattr(self, '1').forward(x)\n");
  torch::jit::Module head_module = scripted("ResHead");
  head_module.register_module("fc", head(16, 5));
  head_module.define("def forward(self, x):\n    return self.fc.forward(x)\n");
  return save_module("residual.pt", {{"stem", dense("Stem", 8, 16)}, {"stage", stage}, {"head", head_module}},
                     "def _forward_impl(self, x):\n"
                     "    x = self.stem.forward(x)\n"
                     "    x = self.stage.forward(x)\n"
                     "    return self.head.forward(torch.flatten(x, 1))\n"
                     "def forward(self, x):\n"
                     "    return self._forward_impl(x)\n");
}

std::map<std::string, std::string> features_input() { return {{"input", "8:float32"}}; }

using testing::error_of;

TEST(TensorSpec, ParsesShapesDtypesAndRanges) {
  const auto image = models::parse_tensor_spec("3x224x224:float32", "input");
  EXPECT_EQ(image.shape, (std::vector<std::int64_t>{3, 224, 224}));
  EXPECT_EQ(image.dtype, "float32");
  EXPECT_EQ(image.text(), "3x224x224:float32");
  const auto tokens = models::parse_tensor_spec("128:int64:0-50257", "input");
  EXPECT_EQ(tokens.low, 0);
  EXPECT_EQ(tokens.high, 50257);
  EXPECT_EQ(tokens.text(), "128:int64:0-50257");
  const auto label = models::parse_tensor_spec("scalar:int64:0-10", "target");
  EXPECT_TRUE(label.shape.empty());
  EXPECT_EQ(label.text(), "scalar:int64:0-10");
  EXPECT_TRUE(models::parse_tensor_spec(":int64:0-10", "target").shape.empty());
  EXPECT_EQ(label.elements(), 1);
}

TEST(TensorSpec, RefusesWhatCannotBeMadeNamingTheFlag) {
  for (const std::string bad : {"", "3x224", "3x0:float32", "3xx4:float32", "-3:float32", "3:float16", "3:int64",
                                "3:int64:5-5", "3:int64:a-b", "3:float32:0-1", "1048577:float32",
                                "1024x1024x1024:float32", "1x1x1x1x1x1x1x1x1:float32", "3:int32:0-4294967296"}) {
    const std::string message = error_of([&] { models::parse_tensor_spec(bad, "input"); });
    EXPECT_EQ(message.rfind("input: ", 0), 0u) << bad << ": " << message;
  }
  EXPECT_NE(error_of([] { models::parse_tensor_spec("3:float16", "input"); }).find("float32, float64, int64, int32"),
            std::string::npos);
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

// Micro-batched and checkpointed against one full batch, from the same weights and data.
double gradient_difference(const fs::path& path, const std::vector<std::int64_t>& micro, const std::vector<int>& checkpointed,
                           bool dropout_on, const std::map<std::string, std::string>& config = features_input()) {
  models::Model model = models::load_torchscript_model(path.string(), config, 0);
  model.set_training(true);
  model.set_dropout(dropout_on);
  executor::Position position;
  executor::PlanRunner runner(model, checkpointed, position);
  const auto batches = executor::make_micro_batches(model, micro, 5, torch::kCPU);
  std::int64_t total = 0;
  for (const auto b : micro) total += b;
  torch::manual_seed(3);
  runner.accumulate(batches, total);
  const auto accumulated = executor::gradients_of(model.parameters());
  for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  if (dropout_on) {
    // With dropout the reference is the same micro-batches without checkpointing, same RNG.
    executor::PlanRunner plain(model, {}, position);
    torch::manual_seed(3);
    plain.accumulate(batches, total);
  } else {
    model.forward(executor::concatenate(batches)).backward();
  }
  return executor::max_relative_difference(accumulated, executor::gradients_of(model.parameters()));
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

// The layers cut from a module as it is written match its own forward, step for step: the loss, and
// the gradients of one backward, whichever depth cuts it.
TEST(TorchScriptGraph, LayersComputeWhatTheModuleComputesAtEveryDepth) {
  const fs::path path = residual_network();
  torch::jit::Module module = torch::jit::load(path.string());
  for (const std::string depth : {"1", "2", "3", ""}) {
    std::map<std::string, std::string> config = features_input();
    if (!depth.empty()) config["depth"] = depth;
    models::Model model = models::load_torchscript_model(path.string(), config, 0);
    model.set_dropout(false);
    const auto batch = model.make_batch(6, 3);
    for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
    const torch::Tensor loss = model.forward(batch);
    loss.backward();
    const auto layered = executor::gradients_of(model.parameters());
    std::vector<torch::Tensor> parameters;
    for (const auto& p : module.parameters()) {
      p.mutable_grad() = torch::Tensor();
      parameters.push_back(p);
    }
    const torch::Tensor logits = module.forward({batch.input}).toTensor();
    const torch::Tensor reference = torch::cross_entropy_loss(logits, batch.target);
    EXPECT_TRUE(torch::allclose(loss, reference, 1e-5, 1e-6)) << "depth " << depth;
    reference.backward();
    EXPECT_LT(executor::max_relative_difference(layered, executor::gradients_of(parameters)), 1e-5) << depth;
  }
}

// The helper method is followed, the residual's add and the flatten run with the layer that reads
// their result, and blocks are the spans between points where one tensor carries everything.
TEST(TorchScriptGraph, HelperMethodsResidualsAndGlueBecomeLayersAndBlocks) {
  const fs::path path = residual_network();
  const auto names = [](const models::Model& model) {
    std::vector<std::string> out;
    for (const auto& layer : model.layers()) out.push_back(layer.name);
    return out;
  };
  const models::Model one = models::load_torchscript_model(path.string(), {{"input", "8:float32"}, {"depth", "1"}}, 0);
  EXPECT_EQ(names(one), (std::vector<std::string>{"stem", "stage", "head", "loss"}));
  const models::Model two = models::load_torchscript_model(path.string(), {{"input", "8:float32"}, {"depth", "2"}}, 0);
  EXPECT_EQ(names(two), (std::vector<std::string>{"stem", "stage.0", "stage.1", "head.fc", "loss"}));
  const models::Model three = models::load_torchscript_model(path.string(), {{"input", "8:float32"}, {"depth", "3"}}, 0);
  // Block 0's sum (and ReLU) is read by block 1's first layer and by its skip: a layer of its own.
  // Block 1's, with the flatten, runs with the head that reads it.
  EXPECT_EQ(names(three), (std::vector<std::string>{"stem", "stage.0.fc1", "stage.0.fc2", "glue:add", "stage.1.fc1",
                                                    "stage.1.fc2", "head.fc", "loss"}));
  const auto& layers = three.layers();
  EXPECT_EQ(layers[1].inputs, (std::vector<int>{0}));
  EXPECT_EQ(layers[3].inputs, (std::vector<int>{2, 0}));  // the branch and the skip
  EXPECT_EQ(layers[6].inputs, (std::vector<int>{5, 3}));
  // Blocks: where one tensor carries everything forward (the stem's output, block 0's sum).
  std::vector<int> blocks;
  for (std::size_t i = 0; i + 1 < layers.size(); ++i) blocks.push_back(layers[i].block);
  EXPECT_EQ(blocks, (std::vector<int>{0, 1, 1, 1, 2, 2, 2}));
  // The default is the shallowest depth with 8 layers that hold parameters, or the deepest there
  // is: here the fully connected layers, 6 of them.
  const models::Model chosen = models::load_torchscript_model(path.string(), features_input(), 0);
  EXPECT_EQ(names(chosen), names(three));
  EXPECT_EQ(chosen.config().values().at("depth"), "3");
  // Named by --layers, the same calls are the same layers.
  const models::Model named = models::load_torchscript_model(
      path.string(), {{"input", "8:float32"}, {"layers", "stem,stage.0.fc1,stage.0.fc2,stage.1.fc1,stage.1.fc2,head.fc"}}, 0);
  EXPECT_EQ(names(named), names(three));
  EXPECT_EQ(named.config().values().at("layers"), "stem,stage.0.fc1,stage.0.fc2,stage.1.fc1,stage.1.fc2,head.fc");
  // Parameters are each counted once, by the layer that uses them.
  std::set<const void*> counted, all;
  std::size_t listed = 0;
  for (const auto& layer : chosen.layers()) {
    for (const auto& p : layer.parameters) counted.insert(p.unsafeGetTensorImpl()), ++listed;
  }
  for (const auto& p : chosen.parameters()) all.insert(p.unsafeGetTensorImpl());
  EXPECT_EQ(counted, all);
  EXPECT_EQ(listed, all.size());
  fs::remove(path);
}

// Glue whose result several layers read (a gate every block uses, made from a layer's output) is a
// layer of its own.
TEST(TorchScriptGraph, GlueThatSeveralLayersReadIsALayerOfItsOwn) {
  torch::manual_seed(4);
  torch::jit::Module gated = scripted("Gated");
  gated.register_module("fc", dense("G", 8, 8));
  gated.define("def forward(self, x, gate):\n    return self.fc.forward(x) * gate\n");
  torch::jit::Module gated2 = scripted("Gated");
  gated2.register_module("fc", dense("G2", 8, 8));
  gated2.define("def forward(self, x, gate):\n    return self.fc.forward(x) * gate\n");
  const fs::path path = save_module("gate.pt", {{"pre", dense("P", 8, 8)}, {"a", gated}, {"b", gated2}, {"out", head(8, 5)}},
                                    "def forward(self, x):\n"
                                    "    x = self.pre.forward(x)\n"
                                    "    gate = torch.sigmoid(x.mean(1, keepdim=True))\n"
                                    "    h = self.a.forward(x, gate)\n"
                                    "    h = self.b.forward(h, gate)\n"
                                    "    return self.out.forward(h)\n");
  const models::Model model = models::load_torchscript_model(path.string(), {{"input", "8:float32"}, {"depth", "1"}}, 0);
  ASSERT_EQ(model.layers().size(), 6u);
  EXPECT_EQ(model.layers()[1].name.rfind("glue:", 0), 0u) << model.layers()[1].name;
  EXPECT_EQ(model.layers()[2].inputs, (std::vector<int>{0, 1}));
  EXPECT_EQ(model.layers()[3].inputs, (std::vector<int>{2, 1}));
  fs::remove(path);
}

// A branch on a setting the module was built with (torchvision's `if self.use_res_connect:`) is
// fixed for the module, so the layers under it are plain layers; `training` stays switchable.
TEST(TorchScriptGraph, BranchesOnTheModulesSettingsAreResolved) {
  torch::manual_seed(6);
  torch::jit::Module block = scripted("Skip");
  block.register_attribute("use_skip", c10::BoolType::get(), true);
  block.register_module("fc", dense("S", 8, 8, 0.5));
  block.define("def forward(self, x):\n"
               "    if self.use_skip:\n"
               "        return self.fc.forward(x) + x\n"
               "    else:\n"
               "        return self.fc.forward(x)\n");
  const fs::path path = save_module("skip.pt", {{"block", block}, {"out", head(8, 5)}},
                                    "def forward(self, x):\n    return self.out.forward(self.block.forward(x))\n");
  models::Model model = models::load_torchscript_model(path.string(), {{"input", "8:float32"}, {"depth", "2"}}, 0);
  ASSERT_EQ(model.layers().size(), 3u);
  EXPECT_EQ(model.layers()[0].name, "block.fc");
  EXPECT_EQ(model.layers()[1].inputs, (std::vector<int>{0, models::kModelInput}));  // the skip
  // Dropout inside still follows the model's mode: on, two runs differ; off, they agree.
  const auto batch = model.make_batch(4, 1);
  torch::NoGradGuard no_grad;
  model.set_dropout(true);
  EXPECT_FALSE(torch::equal(model.forward(batch), model.forward(batch)));
  model.set_dropout(false);
  EXPECT_TRUE(torch::equal(model.forward(batch), model.forward(batch)));
  fs::remove(path);
}

// A layer that writes in place into an earlier layer's output, directly or through a view of it,
// shares that layer's block: a checkpoint's second run would otherwise read the changed tensor.
TEST(TorchScriptGraph, InPlaceWritesKeepTheWriterInTheProducersBlock) {
  torch::manual_seed(7);
  torch::jit::Module view = scripted("View");
  view.define("def forward(self, x):\n    return x.view(x.size(0), -1)\n");
  torch::jit::Module inplace = scripted("InPlaceRelu");
  inplace.define("def forward(self, x):\n    return x.relu_()\n");
  // A linear layer keeps its input for backward, not its output, so writing into the output is allowed.
  torch::jit::Module linear = scripted("Linear8");
  linear.register_parameter("weight", (torch::randn({8, 8}) / std::sqrt(8.0)).requires_grad_(), false);
  linear.define("def forward(self, x):\n    return torch.matmul(x, self.weight.t())\n");
  const fs::path path = save_module("inplace.pt", {{"fc", linear}, {"flat", view}, {"act", inplace}, {"out", head(8, 5)}},
                                    "def forward(self, x):\n"
                                    "    return self.out.forward(self.act.forward(self.flat.forward(self.fc.forward(x))))\n");
  const models::Model model = models::load_torchscript_model(path.string(), features_input(), 0);
  ASSERT_EQ(model.layers().size(), 5u);
  EXPECT_EQ(model.layers()[0].block, model.layers()[1].block);
  EXPECT_EQ(model.layers()[1].block, model.layers()[2].block);
  EXPECT_NE(model.layers()[2].block, model.layers()[3].block);
  // Checkpointed, that block recomputes from the fc's input and the gradients are the full batch's.
  EXPECT_LT(gradient_difference(path, {5, 3}, {model.layers()[0].block}, false), 1e-5);
  fs::remove(path);
}

// A first layer that writes into the batch's input reads a copy of it: checkpointed, its block
// recomputes from the input as it was, and the gradients are the full batch's.
TEST(TorchScriptGraph, ALayerThatWritesIntoTheInputReadsACopy) {
  torch::manual_seed(10);
  torch::jit::Module inplace = scripted("InPlaceInput");
  inplace.define("def forward(self, x):\n    return x.relu_()\n");
  const fs::path path = save_module("input-inplace.pt", {{"act", inplace}, {"fc", dense("J", 8, 8)}, {"out", head(8, 5)}},
                                    "def forward(self, x):\n"
                                    "    return self.out.forward(self.fc.forward(self.act.forward(x)))\n");
  models::Model model = models::load_torchscript_model(path.string(), features_input(), 0);
  const auto batch = model.make_batch(4, 3);
  const torch::Tensor before = batch.input.clone();
  {
    torch::NoGradGuard no_grad;
    model.forward(batch);
  }
  EXPECT_TRUE(torch::equal(batch.input, before));  // the batch is as it was
  EXPECT_LT(gradient_difference(path, {5, 3}, {model.layers()[0].block, model.layers()[1].block}, false), 1e-5);
  fs::remove(path);
}

// Blocks in a ModuleList are a level below the list: the default goes on past it.
TEST(TorchScriptGraph, TheDefaultDepthLooksInsideModuleLists) {
  torch::manual_seed(8);
  torch::jit::Module blocks = scripted("Blocks");
  blocks.register_module("0", residual_block("L0", 8));
  blocks.register_module("1", residual_block("L1", 8));
  const fs::path path = save_module("list.pt", {{"blocks", blocks}, {"out", head(8, 5)}},
                                    "def forward(self, x):\n"
                                    "    x = getattr(self.blocks, '0').forward(x)\n"
                                    "    x = getattr(self.blocks, '1').forward(x)\n"
                                    "    return self.out.forward(x)\n");
  const models::Model model = models::load_torchscript_model(path.string(), features_input(), 0);
  EXPECT_EQ(model.config().values().at("depth"), "3");
  EXPECT_EQ(model.layers()[0].name, "blocks.0.fc1");
  fs::remove(path);
}

// A forward that returns the logits with more (an auxiliary head, features): --output-index picks
// what the loss reads; without it, or past the tuple, one line says what to give.
TEST(TorchScriptGraph, ATupleOutputIsPickedByIndex) {
  torch::manual_seed(9);
  const fs::path path = save_module("tuple-out.pt", {{"fc", dense("T", 8, 8)}, {"out", head(8, 5)}},
                                    "def forward(self, x):\n"
                                    "    h = self.fc.forward(x)\n"
                                    "    return (h, self.out.forward(h))\n");
  const auto refuse = [&](const std::map<std::string, std::string>& config) {
    return error_of([&] { models::load_torchscript_model(path.string(), config, 0); });
  };
  EXPECT_NE(refuse(features_input()).find("name the element the loss reads with --output-index (0 to 1)"), std::string::npos);
  EXPECT_NE(refuse({{"input", "8:float32"}, {"output_index", "2"}}).find("output-index: 2 is past the 2 elements"),
            std::string::npos);
  EXPECT_NE(refuse({{"input", "8:float32"}, {"output_index", "x"}}).find("is not an element's index"), std::string::npos);
  const models::Model model = models::load_torchscript_model(path.string(), {{"input", "8:float32"}, {"output_index", "1"}}, 0);
  EXPECT_EQ(model.config().values().at("target"), "scalar:int64:0-5");  // classes from element 1
  EXPECT_EQ(model.config().values().at("output_index"), "1");
  const auto batch = model.make_batch(4, 2);
  torch::jit::Module module = torch::jit::load(path.string());
  torch::NoGradGuard no_grad;
  const auto logits = module.forward({batch.input}).toTupleRef().elements().at(1).toTensor();
  EXPECT_TRUE(torch::allclose(models::load_torchscript_model(path.string(), {{"input", "8:float32"}, {"output_index", "1"}}, 0)
                                  .forward_to(batch, static_cast<int>(model.layers().size()) - 2),
                              logits, 1e-5, 1e-6));
  fs::remove(path);
}

// Checkpointing a residual block of a module as it is: recomputed in backward, the gradients are the
// full batch's, and the profiled, planned step runs under its budget.
TEST(TorchScriptGraph, ResidualBlocksCheckpointAndRunUnderABudget) {
  const fs::path path = residual_network();
  std::map<std::string, std::string> config = features_input();
  models::Model model = models::load_torchscript_model(path.string(), config, 0);
  std::vector<int> blocks;
  for (const auto& layer : model.layers()) {
    if (layer.block >= 0 && std::find(blocks.begin(), blocks.end(), layer.block) == blocks.end()) blocks.push_back(layer.block);
  }
  ASSERT_EQ(blocks.size(), 3u);  // the stem, then each residual block (the last with the head)
  EXPECT_LT(gradient_difference(path, {5, 4, 3}, {1, 2}, false), 1e-5);

  profiler::ProfileOptions options;
  options.batch_sizes = {1, 2, 4, 8};
  options.repeats = 1;
  const core::Trace trace = profiler::profile(model, options);
  planner::PlanRequest request;
  request.global_batch = 16;
  request.budget_bytes = 1;
  const auto least = planner::plan_step(trace, request).smallest_budget;
  ASSERT_GT(least, 0);
  request.budget_bytes = least * 11 / 10;
  const auto outcome = planner::plan_step(trace, request);
  ASSERT_TRUE(outcome.plan);
  testing::expect_runs_as_predicted(*outcome.plan, trace, 1e-5);
  fs::remove(path);
}

// A forward that takes token-like ids and a mask: each input reaches the layers that read it; what is
// computed from the inputs alone (the additive mask) and a dtype read off an earlier layer's output
// are recomputed by each layer, so every block still starts where one tensor carries everything;
// checkpointed, the blocks read the mask from the batch again, and the planned step runs under its
// budget with the peak predicted at or within 1% above what runs.
TEST(TorchScriptGraph, SeveralInputsReachTheLayersThatReadThemAndBlocksStillCut) {
  torch::manual_seed(11);
  const auto masked = [](const std::string& type) {
    torch::jit::Module m = scripted(type);
    m.register_module("fc", dense(type + "F", 64, 64));
    m.define("def forward(self, x, mask):\n    return self.fc.forward(x) + mask\n");
    return m;
  };
  const fs::path path = save_module("two-inputs.pt", {{"a", masked("Ma")}, {"b", masked("Mb")}, {"c", masked("Mc")}, {"out", head(64, 5)}},
                                    "def forward(self, x, mask):\n"
                                    "    additive = (1.0 - mask.to(x.dtype)) * -4.0\n"
                                    "    h1 = self.a.forward(x, additive)\n"
                                    "    h2 = self.b.forward(h1, (1.0 - mask.to(h1.dtype)) * -4.0)\n"
                                    "    h3 = self.c.forward(h2, (1.0 - mask.to(h1.dtype)) * -4.0)\n"
                                    "    return self.out.forward(h3)\n");
  const std::map<std::string, std::string> config{{"input", "64:float32,64:int64:0-2"}, {"depth", "1"}};
  const auto refuse = [&](const std::map<std::string, std::string>& c) {
    return error_of([&] { models::load_torchscript_model(path.string(), c, 0); });
  };
  EXPECT_NE(refuse({{"input", "64:float32"}}).find("input: the module's forward takes 2 inputs (x, mask); give --input for each"),
            std::string::npos);
  EXPECT_NE(refuse({{"input", "64:float32,64:int64"}}).find("input: integers need their range"), std::string::npos);
  EXPECT_NE(refuse({{"input", "64:float32,"}}).find("input: '' is not a tensor spec"), std::string::npos);

  models::Model model = models::load_torchscript_model(path.string(), config, 0);
  EXPECT_EQ(model.config().values().at("input"), "64:float32,64:int64:0-2");
  const auto& layers = model.layers();
  ASSERT_EQ(layers.size(), 5u);
  const int mask = models::model_input_id(1);
  EXPECT_EQ(mask, -3);
  EXPECT_EQ(layers[0].inputs, (std::vector<int>{models::kModelInput, mask}));
  EXPECT_EQ(layers[1].inputs, (std::vector<int>{0, mask}));
  EXPECT_EQ(layers[2].inputs, (std::vector<int>{1, mask}));  // h1's dtype is a constant, not a read of h1
  for (std::size_t i = 0; i + 1 < layers.size(); ++i) EXPECT_EQ(layers[i].block, static_cast<int>(i)) << layers[i].name;

  const auto batch = model.make_batch(6, 3);
  ASSERT_EQ(batch.further_inputs.size(), 1u);
  EXPECT_EQ(batch.further_inputs[0].scalar_type(), torch::kInt64);
  EXPECT_EQ(batch.further_inputs[0].size(0), 6);
  EXPECT_TRUE(torch::equal(executor::concatenate({batch, batch}).further_inputs[0].slice(0, 6), batch.further_inputs[0]));
  // The layers compute what the module computes, loss and gradients.
  torch::jit::Module module = torch::jit::load(path.string());
  model.set_dropout(false);
  const torch::Tensor loss = model.forward(batch);
  loss.backward();
  const auto layered = executor::gradients_of(model.parameters());
  std::vector<torch::Tensor> parameters;
  for (const auto& p : module.parameters()) parameters.push_back(p);
  const torch::Tensor reference =
      torch::cross_entropy_loss(module.forward({batch.input, batch.further_inputs[0]}).toTensor(), batch.target);
  EXPECT_TRUE(torch::allclose(loss, reference, 1e-5, 1e-6));
  reference.backward();
  EXPECT_LT(executor::max_relative_difference(layered, executor::gradients_of(parameters)), 1e-5);
  // Micro-batched with the middle blocks checkpointed, the gradients are the full batch's.
  EXPECT_LT(gradient_difference(path, {5, 3}, {1, 2}, false, config), 1e-5);

  profiler::ProfileOptions options;
  options.batch_sizes = {1, 4, 16, 64, 256};  // activations well above the weights and Adam's state
  options.repeats = 1;
  const core::Trace trace = profiler::profile(model, options);
  EXPECT_EQ(trace.layers[2].inputs, (std::vector<int>{1, mask}));
  EXPECT_EQ(core::trace_from_json(core::to_json(trace)), trace);
  // Rebuilt from the trace, the module must be cut as it was profiled, not only name the same layers.
  EXPECT_EQ(models::build_traced_model(trace, 0).layers().size(), trace.layers.size());
  core::Trace recut = trace;
  recut.layers[2].inputs = {1, mask, 0};
  recut.layers[2].saves_inputs.push_back(false);
  EXPECT_NE(error_of([&] { models::build_traced_model(recut, 0); }).find("differs from the trace at layer 2 (c): it reads other inputs"),
            std::string::npos);
  const planner::LayerGraph graph(trace);
  for (const auto& span : graph.blocks()) EXPECT_TRUE(span.checkpointable) << span.block << ": " << span.why_not;
  planner::PlanRequest request;
  request.global_batch = 256;
  request.budget_bytes = 1;
  request.strategies = {core::Strategy::Checkpointing};
  const auto least = planner::plan_step(trace, request).smallest_budget;
  ASSERT_GT(least, 0);
  request.budget_bytes = least * 21 / 20;
  const auto outcome = planner::plan_step(trace, request);
  ASSERT_TRUE(outcome.plan);
  EXPECT_FALSE(outcome.plan->choice.checkpointed_blocks.empty());
  testing::expect_runs_as_predicted(*outcome.plan, trace, 1e-5);
  fs::remove(path);
}

}  // namespace
}  // namespace headroom
