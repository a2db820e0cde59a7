// Every field of a plan spoiled in turn (missing, wrong type, out of range): the reader or the check
// against its trace names it, or the field is one they take on purpose.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/atomic_file.h"
#include "core/json_reader.h"
#include "core/plan.h"
#include "core/sha256.h"
#include "core/trace.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "support/build_paths.h"
#include "support/spoiled_fields.h"

namespace headroom {
namespace {

using nlohmann::json;
using testing::Sweep;
using testing::sweep;

const std::string kTrace = std::string(HEADROOM_TRACES_DIR) + "/cpu-mlp.json";

// A clip plan with Inf-CL's tiles, field by field, against its trace.
TEST(BadPlan, EveryFieldOfAnInfClPlanSpoiledIsNamedOrDocumented) {
  const std::string clip = std::string(HEADROOM_TRACES_DIR) + "/cpu-clip.json";
  const core::Trace trace = core::read_trace_file(clip);
  planner::PlanRequest request;
  request.global_batch = 65536;
  request.budget_bytes = std::int64_t{2} << 30;
  request.trace_path = clip;
  request.trace_sha256 = core::sha256_hex(core::read_file(clip));
  request.strategies = planner::all_strategies();
  const auto plan = planner::plan_step(trace, request).plan;
  ASSERT_TRUE(plan && plan->choice.loss_tiles);
  const Sweep s = sweep(core::to_json(*plan), [&](const json& d) {
    planner::check_choice(core::plan_from_json(d, "p.json"), trace, "p.json");
  });
  EXPECT_GT(s.spoiled, 50);
  for (const auto& a : s.accepted) ADD_FAILURE() << "accepted: " << a;
}

core::Plan mlp_plan() {
  const core::Trace trace = core::read_trace_file(kTrace);
  planner::PlanRequest request;
  request.global_batch = 64;
  request.budget_bytes = 1LL << 40;
  request.trace_path = kTrace;
  request.trace_sha256 = core::sha256_hex(core::read_file(kTrace));
  request.strategies = planner::all_strategies();
  return *planner::plan_step(trace, request).plan;
}

TEST(BadPlan, EveryFieldSpoiledIsNamedOrDocumented) {
  const core::Trace trace = core::read_trace_file(kTrace);
  const json good = core::to_json(mlp_plan());
  const Sweep s = sweep(good, [&](const json& d) {
    const core::Plan plan = core::plan_from_json(d, "p.json");
    planner::check_choice(plan, trace, "p.json");
  });
  EXPECT_GT(s.spoiled, 50);
  for (const auto& a : s.accepted) ADD_FAILURE() << "accepted: " << a;
  std::printf("plan: %d spoiled documents, %zu accepted\n", s.spoiled, s.accepted.size());
}

// An L2L plan, field by field: its l2l field too.
TEST(BadPlan, EveryFieldOfAnL2LPlanSpoiledIsNamedOrDocumented) {
  const core::Trace trace = core::read_trace_file(kTrace);
  json good = core::to_json(mlp_plan());
  good["checkpointed_blocks"] = json::array();
  for (auto& layer : good["layers"]) {
    layer["checkpoint"] = false;
    layer["variant"] = "standard";
  }
  good["l2l"] = {{"boundaries", "host"}, {"from_block", 2}};
  planner::check_choice(core::plan_from_json(good, "p.json"), trace, "p.json");
  const Sweep s = sweep(good, [&](const json& d) { planner::check_choice(core::plan_from_json(d, "p.json"), trace, "p.json"); });
  EXPECT_GT(s.spoiled, 50);
  for (const auto& a : s.accepted) ADD_FAILURE() << "accepted: " << a;
}

}  // namespace
}  // namespace headroom
