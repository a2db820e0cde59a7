// The bounds a search can set ranges of micro-batch sizes aside by (issue 36): they must hold
// wherever a search uses them.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/cost_model.h"
#include "core/json_reader.h"
#include "planner/checkpoint_dp.h"
#include "planner/micro_batch_model.h"
#include "planner/split_bounds.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

core::Trace committed(const std::string& name) { return core::read_trace_file(fs::path(HEADROOM_TRACES_DIR) / name); }

// Random chains small enough to try every subset: the bound on the least recompute is that least
// recompute (nothing needs merging), and nothing when no subset fits; the bound on the least peak
// is at most every subset's peak. Kept sizes may be 0 or less (a stage that frees more than it keeps).
TEST(CheckpointDp, RecomputeBoundIsTheLeastRecomputeOfSmallChains) {
  std::mt19937 rng(36);
  const auto uniform = [&](std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng); };
  int feasible = 0;
  for (int round = 0; round < 400; ++round) {
    planner::Chain chain;
    chain.base = uniform(0, 50);
    const int n = static_cast<int>(uniform(1, 12));
    for (int k = 0; k < n; ++k) {
      planner::ChainStage s;
      s.stored_bytes = uniform(-5, 60);
      s.checkpointed_bytes = uniform(-5, s.stored_bytes);
      s.stored_peak = std::max<std::int64_t>(0, s.stored_bytes) + uniform(0, 40);
      s.checkpointed_peak = s.stored_peak + uniform(-10, 10);
      s.recompute_ns = uniform(0, 100);
      s.checkpointable = uniform(0, 9) > 0;
      chain.stages.push_back(s);
    }
    chain.tail_peak = uniform(0, 30);
    const std::int64_t limit = uniform(chain.base - 10, chain.base + 40 * n);
    const auto brute = planner::solve_checkpoint_exhaustive(chain, limit);
    const auto bound = planner::least_recompute_bound(chain, limit);
    ASSERT_EQ(bound.has_value(), brute.feasible) << "round " << round;
    if (brute.feasible) {
      ++feasible;
      EXPECT_EQ(*bound, brute.recompute_ns) << "round " << round;
    }
    // The least peak of any subset: the exhaustive search at the lowest limit that admits one.
    const auto least_peak = planner::least_chain_peak_bound(chain);
    EXPECT_FALSE(planner::solve_checkpoint_exhaustive(chain, least_peak - 1).feasible) << "round " << round;
  }
  EXPECT_GT(feasible, 100);
}

// Chains too long to keep every kept size apart: merged, the bound stays at most what the DP finds.
TEST(CheckpointDp, RecomputeBoundOfLongChainsIsAtMostTheDps) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    planner::Chain chain;
    chain.base = 1000;
    for (int k = 0; k < 60; ++k) {
      const std::int64_t stored = std::uniform_int_distribution<std::int64_t>(100, 900)(rng);
      chain.stages.push_back({stored, stored / 5 + k, stored + 333, stored / 5 + 400, 10 + k * 7 % 13, true});
    }
    const std::int64_t limit = std::uniform_int_distribution<std::int64_t>(6000, 30000)(rng);
    const auto dp = planner::solve_checkpoint_dp(chain, limit, 1);
    const auto bound = planner::least_recompute_bound(chain, limit);
    if (dp.feasible) {
      ASSERT_TRUE(bound.has_value()) << "round " << round;
      EXPECT_LE(*bound, dp.recompute_ns) << "round " << round;
    }
  }
}

// A micro-batch of b samples, of a size in one of affine_ranges (or one below it), takes at least
// b * sample_ns - micro_batch_slack_ns whatever its layer variants, and a checkpointed block
// recomputes for at least its bound.
TEST(SplitBounds, TimeBoundHoldsThroughEachRange) {
  for (const std::string name : {"cpu-bert.json", "cpu-gpt.json", "cpu-cnn.json"}) {
    SCOPED_TRACE(name);
    const core::Trace trace = committed(name);
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    int checked = 0;
    for (const planner::SizeRange range : planner::affine_ranges(trace, 200)) {
      const std::int64_t below = std::max<std::int64_t>(1, range.lo - 1);
      const planner::TimeBound bound =
          planner::time_bound(costs, graph, planner::batch_costs(costs, below), planner::batch_costs(costs, range.hi));
      ASSERT_TRUE(bound.valid);
      for (std::int64_t b = below; b <= range.hi; b += std::max<std::int64_t>(1, (range.hi - below) / 7)) {
        core::StepChoice lean = graph.all_lean();
        core::StepChoice every_block;
        for (const auto& span : graph.blocks()) {
          if (span.checkpointable) every_block.checkpointed_blocks.push_back(span.block);
        }
        std::int64_t recompute = 0;
        for (std::size_t k = 0; k < graph.blocks().size(); ++k) {
          if (graph.blocks()[k].checkpointable) recompute += bound.block_recompute_ns[k];
        }
        const double least = static_cast<double>(b) * bound.sample_ns - bound.micro_batch_slack_ns;
        for (const auto& [choice, recomputed] : {std::pair{core::StepChoice{}, std::int64_t{0}}, std::pair{lean, std::int64_t{0}},
                                                 std::pair{every_block, recompute}}) {
          const auto step = planner::predict_step(costs, graph, choice.with_micro_batches({b}));
          EXPECT_GE(static_cast<double>(step.step_ns - costs.optimizer_ns()), least + static_cast<double>(recomputed)) << "batch " << b;
          ++checked;
        }
      }
    }
    EXPECT_GT(checked, 20);
  }
}

// Byte counts bend only where a count reaches 0: over the ranges of a trace that stays clear of
// it, they are unbent; between sizes on either side of a sample, the ranges are not one line.
TEST(SplitBounds, RangesAreCutAtTheTracesBatchSizes) {
  const core::Trace trace = committed("cpu-bert.json");  // profiled at 1, 2, 4, 8, 16
  const auto ranges = planner::affine_ranges(trace, 1000);
  ASSERT_EQ(ranges.size(), 6u);
  EXPECT_EQ(ranges.front().lo, 1);
  EXPECT_EQ(ranges.front().hi, 1);
  EXPECT_EQ(ranges[4].lo, 9);
  EXPECT_EQ(ranges[4].hi, 16);
  EXPECT_EQ(ranges.back().lo, 17);
  EXPECT_EQ(ranges.back().hi, 1000);
  EXPECT_EQ(planner::affine_ranges(trace, 3).back().hi, 3);
  const core::CostModel costs(trace);
  EXPECT_TRUE(planner::bytes_unbent(costs, planner::batch_costs(costs, 17), planner::batch_costs(costs, 1000)));
}

}  // namespace
}  // namespace headroom
