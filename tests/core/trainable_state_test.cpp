// What a fine-tuning step keeps: the optimizer as configured, and frozen parameters, which hold no
// gradient and no optimizer state.
#include <gtest/gtest.h>

#include "core/cost_model.h"
#include "core/errors.h"
#include "core/freeze_patterns.h"
#include "core/optimizer_spec.h"
#include "core/static_memory.h"
#include "core/trace.h"
#include "support/trace_fixture.h"

namespace headroom {
namespace {

std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::InputError& e) {
    return e.what();
  }
  return "";
}

TEST(OptimizerSpec, EachFormKeepsTheBuffersTorchOptimKeeps) {
  const std::vector<std::pair<std::string, int>> cases = {
      {"sgd", 1}, {"sgd(momentum=0)", 0}, {"sgd(momentum=0.5)", 1}, {"adam", 2}, {"adam(amsgrad)", 3},
      {"adamw", 2}, {"adamw(amsgrad)", 3}};
  for (const auto& [text, buffers] : cases) {
    const core::OptimizerSpec spec = core::parse_optimizer_spec(text);
    EXPECT_EQ(spec.state_buffers(), buffers) << text;
    EXPECT_EQ(spec.text(), text);
    EXPECT_EQ(core::parse_optimizer_spec(spec.text()), spec);
  }
  // "sgd" is momentum 0.9, however it is written.
  EXPECT_EQ(core::parse_optimizer_spec("sgd(momentum=0.90)").text(), "sgd");
}

TEST(OptimizerSpec, BadFormsAndFlagsAreNamed) {
  for (const std::string bad : {"lion", "sgd(momentum=1)", "sgd(momentum=-0.1)", "sgd(momentum=nan)", "sgd(momentum=)",
                                "sgd(nesterov)", "adam(momentum=0)", "adam(amsgrad", "", "SGD"}) {
    EXPECT_EQ(core::optimizer_spec_of(bad), std::nullopt) << bad;
    EXPECT_EQ(input_error([&] { core::parse_optimizer_spec(bad, "--optimizer"); })
                  .rfind("--optimizer: unknown optimizer '" + bad + "' (known: sgd, sgd(momentum=M)", 0),
              0u);
  }
  const double zero = 0, one = 1;
  EXPECT_EQ(core::optimizer_spec_from_flags("sgd", &zero, false).text(), "sgd(momentum=0)");
  EXPECT_EQ(core::optimizer_spec_from_flags("adam", nullptr, true).text(), "adam(amsgrad)");
  EXPECT_EQ(input_error([&] { core::optimizer_spec_from_flags("sgd", &one, false); }),
            "--momentum: momentum must be at least 0 and below 1, got 1");
  EXPECT_EQ(input_error([&] { core::optimizer_spec_from_flags("adam", &zero, false); }),
            "--momentum: only SGD has a momentum setting, and --optimizer is adam");
  EXPECT_EQ(input_error([&] { core::optimizer_spec_from_flags("sgd", nullptr, true); }),
            "--amsgrad: only adam and adamw have amsgrad, and --optimizer is sgd");
}

TEST(FreezePatterns, NameAParameterOrASubmoduleAboveIt) {
  EXPECT_TRUE(core::glob_matches("layer*", "layer4.0.conv1"));
  EXPECT_TRUE(core::glob_matches("*.bn?", "layer1.0.bn1"));
  EXPECT_FALSE(core::glob_matches("layer?", "layer10"));
  EXPECT_TRUE(core::glob_matches("", ""));
  EXPECT_TRUE(core::frozen_by({"layer4"}, "layer4.0.conv1.weight"));
  EXPECT_FALSE(core::frozen_by({"layer4"}, "layer40.weight"));  // a submodule path ends at a dot
  EXPECT_FALSE(core::frozen_by({"conv1"}, "layer4.0.conv1.weight"));  // paths start at the root
  EXPECT_TRUE(core::frozen_by({"*.conv1"}, "layer4.0.conv1.weight"));
  // In order, and ! trains again.
  EXPECT_FALSE(core::frozen_by({"*", "!fc"}, "fc.weight"));
  EXPECT_TRUE(core::frozen_by({"*", "!fc"}, "layer1.0.conv1.weight"));
  EXPECT_TRUE(core::frozen_by({"!fc", "*"}, "fc.weight"));
  EXPECT_EQ(core::parse_freeze_patterns("*,!fc"), (std::vector<std::string>{"*", "!fc"}));
  EXPECT_EQ(input_error([] { core::parse_freeze_patterns("a,,b"); }),
            "--freeze: expected comma-separated patterns such as layer4,fc or *,!fc, got 'a,,b'");
  EXPECT_NE(input_error([] { core::parse_freeze_patterns("!"); }), "");
}

TEST(FreezePatterns, APatternThatNamesNothingOrLeavesNothingToTrainIsRefused) {
  const std::vector<std::string> paths = {"conv1.weight", "layer1.0.conv1.weight", "fc.weight", "fc.bias"};
  const std::vector<bool> none(paths.size(), false);
  EXPECT_EQ(input_error([&] { core::check_freeze_patterns({"*", "!fc"}, paths, none, "resnet18"); }), "");
  EXPECT_EQ(input_error([&] { core::check_freeze_patterns({"layer9"}, paths, none, "resnet18"); }),
            "--freeze: 'layer9' names no parameter of resnet18 (parameters are named by path, e.g. conv1.weight)");
  EXPECT_EQ(input_error([&] { core::check_freeze_patterns({"*"}, paths, none, "resnet18"); }),
            "--freeze: '*' leaves no parameter of resnet18 to train");
  EXPECT_EQ(input_error([&] { core::check_freeze_patterns({}, paths, std::vector<bool>(paths.size(), true), "m"); }),
            "m: every parameter is frozen (requires_grad is False): nothing to train");
  // What the model froze itself counts: freezing the rest leaves nothing.
  EXPECT_NE(input_error([&] { core::check_freeze_patterns({"conv1", "layer1"}, paths, {false, false, true, true}, "m"); }),
            "");
}

core::Trace frozen_trace() {
  core::Trace trace = testing::make_small_trace();
  trace.layers[0].frozen_param_bytes = 300;  // of its 400
  trace.model.freeze = {"fc.weight"};
  return trace;
}

TEST(FrozenParameters, TheTraceRecordsThemAndOlderTracesHaveNone) {
  const core::Trace trace = frozen_trace();
  const nlohmann::json json = core::to_json(trace);
  EXPECT_EQ(json["layers"][0]["frozen_param_bytes"], 300);
  EXPECT_FALSE(json["layers"][1].contains("frozen_param_bytes"));
  EXPECT_EQ(core::trace_from_json(json), trace);
  EXPECT_EQ(trace.trainable_param_bytes(), 100);
  nlohmann::json older = json;
  older["layers"][0].erase("frozen_param_bytes");
  older["model"].erase("freeze");
  const core::Trace read = core::trace_from_json(older);
  EXPECT_FALSE(read.has_frozen_parameters());
  EXPECT_TRUE(read.model.freeze.empty());
  nlohmann::json bad = json;
  bad["layers"][0]["frozen_param_bytes"] = 401;
  EXPECT_NE(input_error([&] { core::trace_from_json(bad, "t.json"); }).find("layers[0].frozen_param_bytes"), std::string::npos);
  bad = json;
  bad["model"]["freeze"] = {"a,b"};
  EXPECT_NE(input_error([&] { core::trace_from_json(bad, "t.json"); }).find("model.freeze[0]"), std::string::npos);
}

TEST(FrozenParameters, HoldNoGradientInTheStaticMemory) {
  const core::Trace trace = frozen_trace();
  const core::CostModel costs(trace);
  EXPECT_EQ(costs.param_bytes(), 400);
  EXPECT_EQ(costs.gradient_bytes(), 100);
  EXPECT_EQ(costs.static_bytes(), 400 + 100 + trace.optimizer.state_bytes);
  const core::StaticMemory memory = core::static_memory(trace);
  EXPECT_EQ(memory.frozen_parameter_elements, 75);
  EXPECT_EQ(memory.gradient_bytes, 100);
  EXPECT_EQ(core::describe_static_memory(memory, core::Precision::Fp32),
            "adam under fp32: 100 parameters, 25 trainable (25.0%): trainable 40 B/param (parameters 4, gradients 4, "
            "optimizer state 32), frozen 4 B/param (parameters only)");
  EXPECT_EQ(core::read_static_memory(core::JsonNode(core::to_json(memory), "static_memory")), memory);
}

TEST(FrozenParameters, TheTraceNormalizesItsOptimizer) {
  nlohmann::json json = core::to_json(testing::make_small_trace());
  json["optimizer"]["name"] = "sgd(momentum=0.0)";
  EXPECT_EQ(core::trace_from_json(json).optimizer.name, "sgd(momentum=0)");
  json["optimizer"]["name"] = "rmsprop";
  EXPECT_NE(input_error([&] { core::trace_from_json(json, "t.json"); }).find("optimizer.name: unknown optimizer 'rmsprop'"),
            std::string::npos);
}

}  // namespace
}  // namespace headroom
