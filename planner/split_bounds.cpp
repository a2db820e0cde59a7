#include "planner/split_bounds.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace headroom::planner {

std::vector<SizeRange> affine_ranges(const core::CostModel& costs, std::int64_t largest) {
  // The ends: the trace's batch sizes, and the multiples of each block below them (past the last
  // size a blocked count is affine: CostModel::transient_at).
  const auto& sizes = costs.trace().batch_sizes;
  std::vector<std::int64_t> ends;
  for (const std::int64_t x : sizes) {
    if (x < largest) ends.push_back(x);
  }
  for (const std::int64_t block : costs.blocks()) {
    for (std::int64_t x = block; x < std::min(largest, sizes.back()); x += block) ends.push_back(x);
  }
  std::sort(ends.begin(), ends.end());
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  std::vector<SizeRange> ranges;
  std::int64_t lo = 1;
  for (const std::int64_t x : ends) {
    if (x < lo) continue;
    ranges.push_back({lo, x});
    lo = x + 1;
  }
  if (lo <= largest) ranges.push_back({lo, largest});
  return ranges;
}

namespace {

// A count kept at 0 or above (rounded from its affine value) is that affine value, rounded,
// throughout the range when it is above 0 at both ends, and 0 throughout when 0 at both.
bool unbent_at_zero(std::int64_t lo, std::int64_t hi) { return (lo > 0) == (hi > 0); }

bool within_limits(std::int64_t v) { return v > -core::kMaxTraceBytes + 1 && v < core::kMaxTraceBytes - 1; }

bool unbent(const core::LayerCost& lo, const core::LayerCost& hi) {
  for (const auto field : {&core::LayerCost::kept_bytes, &core::LayerCost::output_bytes, &core::LayerCost::fwd_transient_bytes,
                           &core::LayerCost::bwd_transient_bytes}) {
    if (!unbent_at_zero(lo.*field, hi.*field)) return false;
  }
  for (const auto field : {&core::LayerCost::kept_bytes, &core::LayerCost::output_bytes, &core::LayerCost::fwd_transient_bytes,
                           &core::LayerCost::bwd_transient_bytes, &core::LayerCost::fwd_retained_bytes,
                           &core::LayerCost::bwd_retained_bytes}) {
    if (!within_limits(lo.*field) || !within_limits(hi.*field)) return false;
  }
  return true;
}

}  // namespace

bool bytes_unbent(const core::CostModel& costs, const BatchCosts& lo, const BatchCosts& hi) {
  const std::int64_t in_lo = costs.input_bytes(lo.batch), in_hi = costs.input_bytes(hi.batch);
  if (!unbent_at_zero(in_lo, in_hi) || !within_limits(in_lo) || !within_limits(in_hi)) return false;
  for (std::size_t i = 0; i < lo.layers.size(); ++i) {
    if (!unbent(lo.layers[i], hi.layers[i]) || !unbent(lo.tempo[i], hi.tempo[i])) return false;
  }
  return true;
}

std::int64_t level_rounding_bytes(const LayerGraph& graph) {
  // An op's bytes (step_sequence.cpp's append_layer_ops) add at most a few of its layer's
  // counts, the outputs a checkpointed block still holds (at most a block's layers), and what
  // Tempo layers move onto it; a layer has at most three ops in a walk (forward, recompute,
  // backward). Each count is within half a byte of its affine value at every size, so a sum of c
  // counts is within c/2 of an affine function, and at any size at least its least value at the
  // ends less c. A level of the checkpointed walk comes from both walks: twice that.
  std::vector<std::int64_t> moved(graph.size(), 0);
  for (const int i : graph.tempo_candidates()) {
    for (const auto& released : graph.released_inputs(i)) ++moved[static_cast<std::size_t>(released.freed_by)];
    if (const int by = graph.held_output(i).released_by; by >= 0) ++moved[static_cast<std::size_t>(by)];
  }
  std::int64_t longest_block = 0;
  for (const auto& span : graph.blocks()) longest_block = std::max<std::int64_t>(longest_block, span.last - span.first + 1);
  std::int64_t counts = 2;  // the input's
  for (const std::int64_t m : moved) counts += 3 * (4 + longest_block + m);
  return 2 * counts;
}

TimeBound time_bound(const core::CostModel& costs, const LayerGraph& graph, const BatchCosts& lo, const BatchCosts& hi) {
  TimeBound bound;
  // Every layer's time is rounded to whole ns from its affine value, then scaled by
  // micro_batch_ns / layer_sum_ns (each rounded from its own affine value) and rounded again
  // (step_sequence.cpp). The scale, a ratio of two affine functions, is monotone over the
  // range: at least the least of its bounds at the ends. Clamps would bend these: none may be near.
  const auto end_sizes = {lo.batch, hi.batch};
  double scale_lo = std::numeric_limits<double>::infinity(), scale_hi = 0;
  for (const std::int64_t b : end_sizes) {
    const std::int64_t m = costs.micro_batch_ns(b), sum = costs.layer_sum_ns(b);
    if (m >= core::kMaxTraceNs - 1 || sum < 2 || sum >= (std::int64_t{1} << 62) - 1) return bound;
    scale_lo = std::min(scale_lo, static_cast<double>(m - 1) / static_cast<double>(sum + 1));
    scale_hi = std::max(scale_hi, static_cast<double>(m + 1) / static_cast<double>(sum - 1));
  }
  scale_lo = std::max(scale_lo, 0.0);
  // A scaled time held at kMaxTraceNs would fall below its scaled value.
  const double cap = static_cast<double>(core::kMaxTraceNs) / 2;
  const auto capped = [&](std::int64_t ns) { return ns >= core::kMaxTraceNs - 1 || static_cast<double>(ns + 1) * scale_hi >= cap; };
  // Each layer at its faster variant: that sum, a sum of least-of-two affine functions, is concave
  // over the range, so its value per sample is least at an end.
  const auto layer_count = static_cast<double>(lo.layers.size());
  double per_sample = std::numeric_limits<double>::infinity();
  for (const BatchCosts* at : {&lo, &hi}) {
    double fastest = 0;
    for (std::size_t i = 0; i < at->layers.size(); ++i) {
      for (const core::LayerCost* c : {&at->layers[i], &at->tempo[i]}) {
        if (capped(c->fwd_ns) || capped(c->bwd_ns)) return bound;
      }
      fastest += static_cast<double>(std::min(at->layers[i].fwd_ns + at->layers[i].bwd_ns, at->tempo[i].fwd_ns + at->tempo[i].bwd_ns));
    }
    // Each time is within half a ns of its affine value: a layer's two within one.
    per_sample = std::min(per_sample, (fastest - layer_count) / static_cast<double>(at->batch));
  }
  // A micro-batch of b takes at least scale * (b * per_sample - layers) - layers (a scaled op is
  // within half a ns of its time times the scale), and never less than 0.
  bound.sample_ns = scale_lo * per_sample;
  bound.micro_batch_slack_ns = (scale_lo + 1) * layer_count;
  // A checkpointed block runs its layers' forwards again, each at least at its faster variant: a
  // sum of least-of-two affine functions, concave, least at an end.
  for (const auto& span : graph.blocks()) {
    double forward = std::numeric_limits<double>::infinity();
    const auto n = static_cast<double>(span.last - span.first + 1);
    for (const BatchCosts* at : {&lo, &hi}) {
      std::int64_t sum = 0;
      for (int i = span.first; i <= span.last; ++i) {
        const auto k = static_cast<std::size_t>(i);
        sum += std::min(at->layers[k].fwd_ns, at->tempo[k].fwd_ns);
      }
      forward = std::min(forward, static_cast<double>(sum) - n / 2);
    }
    bound.block_recompute_ns.push_back(
        static_cast<std::int64_t>(std::floor(std::max(0.0, scale_lo * (forward - n / 2) - n / 2))));
  }
  bound.valid = true;
  return bound;
}

}  // namespace headroom::planner
