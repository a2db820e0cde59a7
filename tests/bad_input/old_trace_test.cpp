#include <gtest/gtest.h>

#include "core/atomic_file.h"
#include "core/json_reader.h"
#include "core/trace.h"
#include "planner/plan_search.h"
#include "support/build_paths.h"

namespace headroom {
namespace {

using nlohmann::json;

const std::string kTrace = std::string(HEADROOM_TRACES_DIR) + "/cpu-mlp.json";

// A trace from before the model's extra bytes and the checkpoint's RNG state were recorded still
// plans, and the plan says its peak may be low.
TEST(OldTrace, PlansSayTheirPeakMayBeLow) {
  json old = core::parse_json(core::read_file(kTrace), kTrace);
  old.erase("checkpoint_state_bytes");
  old.erase("model_extra_bytes");
  const core::Trace trace = core::trace_from_json(old, "old.json");
  EXPECT_FALSE(trace.extras_recorded);
  planner::PlanRequest request;
  request.global_batch = 64;
  request.budget_bytes = 1LL << 40;
  const auto plan = planner::plan_step(trace, request).plan;
  ASSERT_TRUE(plan);
  bool warned = false;
  for (const auto& w : plan->warnings) warned |= w.find("may be a few KiB low") != std::string::npos;
  EXPECT_TRUE(warned);
  EXPECT_TRUE(core::trace_from_json(core::parse_json(core::read_file(kTrace), kTrace), "t.json").extras_recorded);
}

}  // namespace
}  // namespace headroom
