#include <gtest/gtest.h>

#include <filesystem>

#include "planner/plan_explanation.h"
#include "planner/plan_search.h"
#include "support/build_paths.h"
#include "support/trace_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using planner::ChoiceFacts;
using planner::WeighedStep;

constexpr std::int64_t MiB = 1 << 20;

WeighedStep step(std::vector<std::int64_t> micro, std::int64_t peak_mib, double samples_per_second,
                 int checkpointed = 0, int tempo = 0) {
  return {planner::MicroBatchSizes::of(micro), checkpointed, tempo, {peak_mib * MiB, 1.0, samples_per_second}, std::nullopt};
}

ChoiceFacts facts(std::int64_t limit_mib, std::int64_t margin_mib) {
  ChoiceFacts f;
  f.limit_bytes = limit_mib * MiB;
  f.margin_bytes = margin_mib * MiB;
  return f;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(PlanExplanation, TheWholeBatchAsItIsBindsNothing) {
  ChoiceFacts f = facts(1000, 50);
  f.chosen = f.whole_batch = f.largest_fitting = step({32}, 578, 20.0);
  EXPECT_EQ(planner::binding_constraint(f), "none: the whole batch fits (578 MiB of 1000 MiB left after the 50.0 MiB margin)");
}

TEST(PlanExplanation, AFasterPlanWhereTheWholeBatchFitsIsChosenForSpeed) {
  ChoiceFacts f = facts(2000, 100);
  f.whole_batch = f.largest_fitting = step({32}, 578, 20.0);
  f.chosen = step({8, 8, 8, 8}, 250, 25.0);
  const std::string why = planner::binding_constraint(f);
  EXPECT_EQ(why.rfind("speed: ", 0), 0u) << why;
  EXPECT_FALSE(has(why, "memory")) << why;
  // Names the alternative it beat and by how much.
  EXPECT_TRUE(has(why, "4 micro-batches of 8, 0 checkpointed blocks run at 25 samples/s, 25.0% faster than the whole batch with nothing applied (20 samples/s)")) << why;
  EXPECT_TRUE(has(why, "which also fits (578 MiB of")) << why;
}

TEST(PlanExplanation, TempoLayersMeasuredFasterAreUsedForSpeed) {
  ChoiceFacts f = facts(2000, 100);
  f.tempo_candidates = 8;
  f.tempo_measured_faster = 4;
  f.whole_batch = f.largest_fitting = step({32}, 578, 20.0);
  f.chosen = step({32}, 560, 21.0, 0, 4);
  const std::string why = planner::binding_constraint(f);
  EXPECT_EQ(why.rfind("speed: the whole batch with 4 Tempo layers runs at 21 samples/s, 5.0% faster", 0), 0u) << why;
  EXPECT_TRUE(has(why, "the 4 Tempo layers measured no slower than the standard ones are always used")) << why;
}

TEST(PlanExplanation, MemoryNamesWhatItForcedAndWhatSpeedChose) {
  ChoiceFacts f = facts(300, 15);
  f.whole_batch = step({32}, 578, 20.0);
  // Micro-batches of 16 fit only with checkpointing; plain ones of 8 are faster.
  f.largest_fitting = step({16, 16}, 290, 18.0, 2);
  f.chosen = step({8, 8, 8, 8}, 250, 19.8);
  std::string why = planner::binding_constraint(f);
  EXPECT_EQ(why.rfind("memory: the whole batch with nothing applied needs 578 MiB, over the 300 MiB left", 0), 0u) << why;
  EXPECT_TRUE(has(why, "the largest micro-batches that fit are of 16 (2 checkpointed blocks, 18 samples/s), but "
                       "micro-batches of 8 (nothing applied) are 10.0% faster: 19.8 samples/s"))
      << why;

  // When the largest that fits is chosen, memory set the micro-batch size too, and checkpointing is
  // explained by what the step would need without it.
  f.chosen = f.largest_fitting;
  f.peak_without_checkpointing = 420 * MiB;
  why = planner::binding_constraint(f);
  EXPECT_TRUE(has(why, "micro-batches of 16 are the largest that fit")) << why;
  EXPECT_TRUE(has(why, "without checkpointing micro-batches of 16 need 420 MiB")) << why;
  EXPECT_FALSE(has(why, "faster")) << why;
}

planner::PlanRequest request(std::int64_t budget, std::int64_t batch) {
  planner::PlanRequest r;
  r.budget_bytes = budget;
  r.global_batch = batch;
  r.strategies = planner::parse_strategies("all");
  return r;
}

TEST(PlanExplanation, CommittedBertPlansSayWhetherMemoryOrSpeedDecided) {
  const core::Trace trace = core::read_trace_file(fs::path(HEADROOM_TRACES_DIR) / "cpu-bert.json");
  // 20 GiB holds the whole batch many times over: whatever the plan does, it did for speed.
  const auto roomy = planner::plan_step(trace, request(20LL << 30, 32));
  ASSERT_TRUE(roomy.plan);
  const std::string& roomy_why = roomy.plan->binding_constraint;
  EXPECT_TRUE(roomy_why.rfind("speed: ", 0) == 0 || roomy_why.rfind("none: ", 0) == 0) << roomy_why;
  EXPECT_FALSE(has(roomy_why, "over the")) << roomy_why;

  // Under the whole batch's need, memory binds.
  const auto tight = planner::plan_step(trace, request(300 * MiB, 32));
  ASSERT_TRUE(tight.plan);
  EXPECT_EQ(tight.plan->binding_constraint.rfind("memory: the whole batch with nothing applied needs ", 0), 0u)
      << tight.plan->binding_constraint;
}

// A plan whose micro-batches lie between the profiled sizes says how far its peak, a bound there, is
// above the line through the sizes around them, with the command that profiles them in; once they
// are, the plan is exact and says nothing. fc's backward scratch steps up by 400,000 bytes at 20,
// which 8, 16, 32 and 64 show only as a steeper segment from 16 to 32.
TEST(PlanExplanation, APlanBetweenProfiledSizesSaysHowMuchOfItsPeakIsTheBound) {
  const auto held = [](std::int64_t b) { return 40000 * b + (b >= 20 ? 400000 : 0); };
  const auto profiled_at = [&](const std::vector<std::int64_t>& sizes) {
    core::Trace trace = testing::make_small_trace();
    testing::resample(trace, sizes, [&](const core::LayerProfile& layer, std::size_t, core::LayerSample& s) {
      if (layer.name == "fc") s.bwd_transient_bytes = held(s.batch);
    });
    return trace;
  };
  planner::PlanRequest request;
  request.global_batch = 24;
  request.budget_bytes = 1LL << 30;
  request.trace_path = "t.json";

  const core::Trace between = profiled_at({8, 16, 32, 64});
  const auto plan = planner::plan_step(between, request).plan;
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->choice.micro_batches, std::vector<std::int64_t>{24});
  std::string note;
  for (const auto& w : plan->warnings) {
    if (has(w, "were not profiled")) note = w;
  }
  // The bound is the scratch that ran (the step at 20 held in full at 24); the line, 200,000 bytes
  // under it.
  EXPECT_TRUE(has(note, "micro-batches of 24 were not profiled: the predicted peak is a bound there, 195 KiB (")) << note;
  EXPECT_TRUE(has(note, "--batch-sizes 24 --add-to t.json -o t.json")) << note;

  const core::Trace measured = profiled_at({8, 16, 24, 32, 64});
  const auto exact = planner::plan_step(measured, request).plan;
  ASSERT_TRUE(exact);
  EXPECT_EQ(exact->predicted.peak_bytes, plan->predicted.peak_bytes);
  for (const auto& w : exact->warnings) EXPECT_FALSE(has(w, "were not profiled")) << w;
}

}  // namespace
}  // namespace headroom
