// The bounds of the bounded plan search (planner/split_bounds.h): lower bounds on the step time over
// ranges of micro-batch sizes, which must hold wherever the search uses them to set a range aside.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/cost_model.h"
#include "planner/layer_graph.h"
#include "planner/split_bounds.h"
#include "planner/step_sequence.h"
#include "support/plan_requests.h"

namespace headroom {
namespace {

using testing::committed;

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
    for (const planner::SizeRange range : planner::affine_ranges(costs, 200)) {
      const std::int64_t below = std::max<std::int64_t>(1, range.lo - 1);
      const planner::TimeBound bound =
          planner::time_bound(costs, graph, planner::batch_costs(costs, below), planner::batch_costs(costs, range.hi));
      ASSERT_TRUE(bound.valid);
      for (std::int64_t b = below; b <= range.hi; b += std::max<std::int64_t>(1, (range.hi - below) / 7)) {
        core::StepChoice tempo = graph.all_tempo();
        core::StepChoice every_block;
        for (const auto& span : graph.blocks()) {
          if (span.checkpointable) every_block.checkpointed_blocks.push_back(span.block);
        }
        std::int64_t recompute = 0;
        for (std::size_t k = 0; k < graph.blocks().size(); ++k) {
          if (graph.blocks()[k].checkpointable) recompute += bound.block_recompute_ns[k];
        }
        const double least = static_cast<double>(b) * bound.sample_ns - bound.micro_batch_slack_ns;
        for (const auto& [choice, recomputed] : {std::pair{core::StepChoice{}, std::int64_t{0}}, std::pair{tempo, std::int64_t{0}},
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

// The ranges end at the trace's batch sizes (and at the largest asked for); past bert's last, no
// byte count reaches 0 or a limit, so none bends.
TEST(SplitBounds, RangesAreCutAtTheTracesBatchSizes) {
  const core::Trace trace = committed("cpu-bert.json");  // profiled at 1, 2, 4, 8, 16
  const core::CostModel costs(trace);
  const auto ranges = planner::affine_ranges(costs, 1000);
  ASSERT_EQ(ranges.size(), 6u);
  EXPECT_EQ(ranges.front().lo, 1);
  EXPECT_EQ(ranges.front().hi, 1);
  EXPECT_EQ(ranges[4].lo, 9);
  EXPECT_EQ(ranges[4].hi, 16);
  EXPECT_EQ(ranges.back().lo, 17);
  EXPECT_EQ(ranges.back().hi, 1000);
  EXPECT_EQ(planner::affine_ranges(costs, 3).back().hi, 3);
  EXPECT_TRUE(planner::bytes_unbent(costs, planner::batch_costs(costs, 17), planner::batch_costs(costs, 1000)));
}

}  // namespace
}  // namespace headroom
