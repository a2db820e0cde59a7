#pragma once
// What every split of the global batch whose largest micro-batch lies in a range of sizes can at
// best do, so that a search can set a whole range aside at once (plan_search.cpp) instead of
// weighing each of its splits. Between two of the trace's batch sizes, and past the last,
// core::CostModel gives every time as one affine function of the micro-batch size scaled by the
// ratio of two more, and every byte count as one affine function (rounded to whole bytes), once the
// ranges are also cut at the multiples of the blocks some transients are allocated in below the
// last size (CostModel::blocks: such a transient is constant from one multiple to the next there).
// Over such a range a level of a step's walk, a sum of byte counts, is least at an end, and so is a
// time per sample; the bounds here rest on that and on nothing the search chooses.
#include <cstdint>
#include <vector>

#include "core/cost_model.h"
#include "planner/layer_graph.h"
#include "planner/step_sequence.h"

namespace headroom::planner {

// A range of micro-batch sizes, both ends included.
struct SizeRange {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
};

// Sizes 1 to `largest` cut at the trace's batch sizes and at the multiples of costs.blocks() below
// the last of them: over each range every number core::CostModel gives follows one affine function,
// and every time does over each range widened one size down.
std::vector<SizeRange> affine_ranges(const core::CostModel& costs, std::int64_t largest);

// Whether, from `lo`'s size to `hi`'s (one of affine_ranges), every byte count batch_costs gives
// and the input's bytes follow their affine function: no clamp (at 0 or at the trace's limits)
// bends one in between.
bool bytes_unbent(const core::CostModel& costs, const BatchCosts& lo, const BatchCosts& hi);

// How far, in bytes, a level of a micro-batch's walk, or a difference of two, may fall below the
// least of its values at the two ends of a range where bytes_unbent holds: every count in it was
// rounded to whole bytes at each size.
std::int64_t level_rounding_bytes(const LayerGraph& graph);

// The least time a micro-batch of b samples, of a size from `lo`'s to `hi`'s (one of
// affine_ranges), takes whatever its layer variants and checkpointing:
// b * sample_ns - micro_batch_slack_ns; and each checkpointed block's recompute at least.
struct TimeBound {
  bool valid = false;  // false where a clamp bends a time in the range: nothing is bounded
  double sample_ns = 0;
  double micro_batch_slack_ns = 0;
  std::vector<std::int64_t> block_recompute_ns;  // by the graph's blocks, in order
};
TimeBound time_bound(const core::CostModel& costs, const LayerGraph& graph, const BatchCosts& lo, const BatchCosts& hi);

}  // namespace headroom::planner
