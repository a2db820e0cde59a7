// A user's TorchScript module cut into layers at its submodule calls, helper methods, residuals and
// glue (models/script_graph.h): the layers compute what the module computes, and cut into blocks
// that checkpoint and run under a budget. The modules are scripted in C++
// (tests/support/torchscript_modules.h), so these tests need no Python.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "core/errors.h"
#include "executor/executor.h"
#include "executor/plan_runner.h"
#include "models/model_source.h"
#include "models/torchscript_model.h"
#include "planner/layer_graph.h"
#include "planner/plan_search.h"
#include "profiler/profiler.h"
#include "support/input_error.h"
#include "support/runs_as_predicted.h"
#include "support/torchscript_modules.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

using testing::dense;
using testing::error_of;
using testing::features_input;
using testing::gradient_difference;
using testing::head;
using testing::residual_block;
using testing::residual_network;
using testing::save_module;
using testing::scripted;

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
