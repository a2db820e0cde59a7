#include <gtest/gtest.h>

#include <functional>

#include "core/errors.h"
#include "core/plan.h"

namespace headroom {
namespace {

// Plans and reports whose numbers wrapped or overflowed: a micro-batch sum past int64 (UB), ids and
// block indexes past int's range that narrowed to accepted ones.
TEST(PlanFile, NumbersPastTheirRangeAreRejected) {
  core::Plan plan;
  plan.trace_path = "t.json";
  plan.trace_sha256 = std::string(64, '0');
  plan.budget_bytes = 1 << 30;
  plan.global_batch = 8;
  plan.choice.micro_batches = {4, 4};
  plan.choice.checkpointed_blocks = {1};
  plan.choice.layers = {{0, "fc", false, core::LayerVariant::Standard}};
  plan.runner_ups = {{4, 1, {}, "slower"}};
  // A technique's predicted parts (none here) are written only where the step has them.
  EXPECT_FALSE(core::to_json(plan).contains("predicted_parts"));
  plan.predicted_parts = {{"allreduce_seconds", 0.25}, {"l2l_host_bytes", 3e9}};
  const nlohmann::json good = core::to_json(plan);
  ASSERT_EQ(core::plan_from_json(good), plan);
  EXPECT_EQ(plan.predicted_part("allreduce_seconds"), 0.25);
  EXPECT_FALSE(plan.predicted_part("l2l_copy_seconds"));
  const std::int64_t huge = std::int64_t{1} << 62;
  struct Case {
    std::function<void(nlohmann::json&)> spoil;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[&](nlohmann::json& d) { d["micro_batches"] = {huge, huge, huge, huge}; }, "$.micro_batches[0]: micro-batch of 4611686018427387904 is larger"},
      {[&](nlohmann::json& d) { d["global_batch"] = huge; }, "$.global_batch: expected at most 1048576"},
      {[&](nlohmann::json& d) { d["micro_batches"] = {4, 4, 1}; }, "$.micro_batches: sizes sum to 9 or more, not the global batch 8"},
      {[&](nlohmann::json& d) { d["layers"][0]["id"] = std::int64_t{1} << 32; }, "$.layers[0].id: expected 0"},
      {[&](nlohmann::json& d) { d["checkpointed_blocks"] = {(std::int64_t{1} << 32) + 1}; },
       "$.checkpointed_blocks[0]: expected an integer from 0 to 16383, got 4294967297"},
      {[&](nlohmann::json& d) { d["explanation"]["runner_ups"][0]["checkpointed_blocks"] = std::int64_t{1} << 32; },
       "$.explanation.runner_ups[0].checkpointed_blocks: expected an integer from 0"},
      {[&](nlohmann::json& d) { d["layers"][0]["variant"] = "fp8"; },
       "$.layers[0].variant: unknown layer variant 'fp8' (expected standard or tempo)"},
      {[&](nlohmann::json& d) { d["layers"][0]["tempo"] = true; },
       "$.layers[0].tempo: give either variant or the older tempo flag, not both"},
      {[&](nlohmann::json& d) { d["world_size"] = 0; }, "$.world_size: expected an integer from 1 to 4096, got 0"},
      // A technique no step runs, or an optimizer nothing builds: refused with the names known.
      {[&](nlohmann::json& d) { d["strategies"] = {"mbp", "offload"}; },
       "$.strategies[1]: unknown strategy 'offload' (known: mbp, checkpoint, tempo, infcl, l2l)"},
      {[&](nlohmann::json& d) { d["optimizer"] = "rmsprop"; }, "$.optimizer: unknown optimizer 'rmsprop' (known: sgd, "
                 "sgd(momentum=M), adam, adam(amsgrad), adamw, adamw(amsgrad))"},
      {[&](nlohmann::json& d) { d["predicted_parts"]["allreduce_seconds"] = -1; },
       "$.predicted_parts.allreduce_seconds: expected a figure from 0 to 1e18"},
      {[&](nlohmann::json& d) { d["predicted_parts"]["l2l_host_bytes"] = "3 GB"; }, "$.predicted_parts.l2l_host_bytes: expected"},
      {[&](nlohmann::json& d) { d["predicted_parts"] = {1, 2}; }, "$.predicted_parts: expected"},
      {[&](nlohmann::json& d) { d["predicted_parts"]["matmul_bound_seconds"] = -0.5; },
       "$.predicted_parts.matmul_bound_seconds: expected a figure from 0 to 1e18"},
      // A class of work twice as slow cannot lengthen the step by more than the step.
      {[&](nlohmann::json& d) { d["predicted_parts"]["memory_bound_seconds"] = 1e6; },
       "$.predicted_parts.memory_bound_seconds: expected at most the predicted step"},
      {[&](nlohmann::json& d) { d["predicted_parts"]["allreduce_second"] = 1; },
       "$.predicted_parts.allreduce_second: unknown part (known: l2l_compute_seconds"},
  };
  for (const auto& c : cases) {
    nlohmann::json document = good;
    c.spoil(document);
    try {
      core::plan_from_json(document, "p.json");
      ADD_FAILURE() << "accepted; wanted: " << c.expected;
    } catch (const core::InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("p.json: " + c.expected, 0), 0u) << "got: " << e.what() << "\nwanted: " << c.expected;
    }
  }
}

}  // namespace
}  // namespace headroom
