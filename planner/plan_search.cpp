#include "planner/plan_search.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "core/errors.h"
#include "core/optimizer_spec.h"
#include "core/sharding.h"
#include "core/static_memory.h"
#include "core/units.h"
#include "core/unprofiled_sizes.h"
#include "planner/data_parallel_model.h"
#include "planner/device_error.h"
#include "planner/infcl_model.h"
#include "planner/l2l_model.h"
#include "planner/optimizer_estimate.h"
#include "planner/plan_explanation.h"
#include "planner/split_bounds.h"
#include "planner/step_sequence.h"
#include "planner/technique.h"

namespace headroom::planner {

std::vector<std::int64_t> split_batch(std::int64_t global_batch, std::int64_t count) {
  const std::int64_t q = global_batch / count, r = global_batch % count;
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(count), q);
  for (std::int64_t i = 0; i < r; ++i) sizes[static_cast<std::size_t>(i)] += 1;
  return sizes;
}

namespace {

// A walk's levels from 0: when each op starts, while it runs and once it has ended.
struct Levels {
  std::vector<std::int64_t> before;
  std::vector<std::int64_t> during;
  std::vector<std::int64_t> after;
};

Levels levels_of(const std::vector<Op>& ops) {
  Levels out;
  out.before.reserve(ops.size());
  out.during.reserve(ops.size());
  out.after.reserve(ops.size());
  std::int64_t level = 0;
  for (const auto& op : ops) {
    out.before.push_back(level);
    out.during.push_back(level + op.transient_bytes);
    level += op.retained_bytes;
    out.after.push_back(level);
  }
  return out;
}

// One micro-batch size's walks for one choice of layer variants: what its chain is made of
// (chain_over), kept so that a search bounding many ranges of sizes walks each size once.
struct ChainWalks {
  std::int64_t absolute = 0;  // static state and input
  std::vector<Op> stored_ops;  // every layer stored: each layer's forward, then each backward
  Levels stored;
  // By block of the graph's chain: the stage's ops with its block checkpointed (none where it cannot be).
  std::vector<std::vector<Op>> checkpointed;
};

// Stage k of the chain covers block k and any non-block layers up to the next block.
int stage_end(const LayerGraph& graph, std::size_t k) {
  const auto& blocks = graph.blocks();
  return k + 1 < blocks.size() ? blocks[k + 1].first - 1 : blocks[k].last;
}

ChainWalks chain_walks(const core::CostModel& costs, const LayerGraph& graph, const BatchCosts& at,
                       const core::StepChoice& variants, bool stages) {
  ChainWalks walks;
  const int layers = static_cast<int>(costs.layer_count());
  core::StepChoice choice = variants;
  choice.checkpointed_blocks.clear();
  // What a worker holds throughout: a data-parallel worker's share of the state, and its buckets.
  walks.absolute = worker_static_bytes(costs, choice) + costs.input_bytes(at.batch);
  walks.stored_ops = micro_batch_ops(at, graph, choice, 0, layers - 1);
  walks.stored = levels_of(walks.stored_ops);
  if (!stages) return walks;
  const auto& blocks = graph.blocks();
  walks.checkpointed.resize(blocks.size());
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    if (!blocks[k].checkpointable) continue;
    choice.checkpointed_blocks = {blocks[k].block};
    walks.checkpointed[k] = micro_batch_ops(at, graph, effective_variants(graph, choice), blocks[k].first, stage_end(graph, k));
  }
  return walks;
}

struct ChainAndWalk {
  Chain chain;
  std::int64_t walk_peak = 0;  // the stored walk's highest level, with the static state and input
};

// The chain at each of `points` (one size's walks each, for the same variants), each number the
// least it takes at any of them: at one point the chain itself; at the two ends of a range over
// which every byte count is affine, each number is a level or a difference of levels, so affine
// too, and the least at the ends is the least over the range (up to rounding: weigh_bounded). A
// peak, the highest of several levels, is bounded level by level.
class ChainOverPoints {
 public:
  ChainOverPoints(const LayerGraph& graph, const std::vector<const ChainWalks*>& points)
      : graph_(graph), points_(points), n_(points.size()), shape_(points.front()->stored_ops), layers_(shape_.size() / 2) {}

  // Without `stages`, only the walk's peak.
  ChainAndWalk chain_and_walk(bool stages) const {
    ChainAndWalk out;
    out.walk_peak = walk_peak();
    if (!stages) return out;
    if (graph_.blocks().empty()) {
      out.chain.base = least([&](std::size_t p) { return absolute(p); });
      for (std::size_t i = 0; i < shape_.size(); ++i) {
        out.chain.tail_peak = std::max(out.chain.tail_peak, high_above(i, [](std::size_t) { return 0; }));
      }
      return out;
    }
    if (shape_.size() != 2 * graph_.size()) throw std::logic_error("chain_over: a stored walk has one forward and one backward per layer");
    base_and_tail(out.chain);
    for (std::size_t k = 0; k < graph_.blocks().size(); ++k) out.chain.stages.push_back(stage(k));
    return out;
  }

 private:
  // A stage's stored ops: its forwards from `start` up to `end` (the level after its last forward),
  // its backwards from `backward_start`.
  struct StageSpan {
    std::size_t start = 0, end = 0, backward_start = 0;
  };

  template <typename At>
  std::int64_t least(At&& at) const {
    std::int64_t value = at(std::size_t{0});
    for (std::size_t p = 1; p < n_; ++p) value = std::min(value, at(p));
    return value;
  }
  const Levels& stored(std::size_t p) const { return points_[p]->stored; }
  std::int64_t absolute(std::size_t p) const { return points_[p]->absolute; }
  // Stored op i's level while it runs and after it, above `prefix` (a level at each point).
  template <typename Prefix>
  std::int64_t high_above(std::size_t i, Prefix&& prefix) const {
    return std::max(least([&](std::size_t p) { return stored(p).during[i] - prefix(p); }),
                    least([&](std::size_t p) { return stored(p).after[i] - prefix(p); }));
  }
  // Stored ops are every forward, then every backward, one of each per layer: a layer's are found
  // by its id, and the level after all forwards is where the first backward starts.
  static std::size_t forward(int layer) { return static_cast<std::size_t>(layer); }
  std::size_t backward(int layer) const { return 2 * layers_ - 1 - static_cast<std::size_t>(layer); }
  std::size_t after_forward_index(int last) const { return std::min(forward(last + 1), layers_); }

  std::int64_t walk_peak() const {
    std::int64_t peak = least([&](std::size_t p) { return absolute(p); });
    for (std::size_t i = 0; i < shape_.size(); ++i) {
      peak = std::max(peak, high_above(i, [&](std::size_t p) { return -absolute(p); }));
    }
    return peak;
  }

  void base_and_tail(Chain& chain) const {
    const auto& blocks = graph_.blocks();
    const std::size_t first_forward = forward(blocks.front().first);
    chain.base = least([&](std::size_t p) { return absolute(p) + stored(p).before[first_forward]; });
    // Layers before the first block peak the same whatever the choices (their forward runs before
    // the blocks, their backward after the blocks are freed); the exact check in fit() covers them.
    const int tail_first = blocks.back().last + 1;
    const std::size_t tail_start = after_forward_index(tail_first - 1);
    const auto tail_prefix = [&](std::size_t p) { return stored(p).before[tail_start]; };
    for (int layer = tail_first; static_cast<std::size_t>(layer) < layers_; ++layer) {
      chain.tail_peak = std::max({chain.tail_peak, high_above(forward(layer), tail_prefix), high_above(backward(layer), tail_prefix)});
    }
  }

  ChainStage stage(std::size_t k) const {
    const auto& blocks = graph_.blocks();
    const int first = blocks[k].first, last = stage_end(graph_, k);
    const StageSpan span{forward(first), after_forward_index(last), backward(last)};
    const auto prefix = [&](std::size_t p) { return stored(p).before[span.start]; };
    ChainStage stage;
    stage.stored_bytes = least([&](std::size_t p) { return stored_bytes(span, p); });
    for (int layer = first; layer <= last; ++layer) {
      stage.stored_peak = std::max({stage.stored_peak, high_above(forward(layer), prefix), high_above(backward(layer), prefix)});
    }
    stage.checkpointable = blocks[k].checkpointable;
    if (stage.checkpointable) walk_checkpointed(k, span, stage);
    return stage;
  }

  std::int64_t stored_bytes(const StageSpan& span, std::size_t p) const {
    return stored(p).before[span.end] - stored(p).before[span.start];
  }

  // Walk only this stage's ops with the block checkpointed: its forward from the prefix, its
  // recompute and backward from the level the stored walk has there, less what checkpointing
  // stopped this stage from keeping.
  void walk_checkpointed(std::size_t k, const StageSpan& span, ChainStage& stage) const {
    const auto ops = [&](std::size_t p) -> const std::vector<Op>& { return points_[p]->checkpointed[k]; };
    std::vector<std::int64_t> level(n_, 0), recompute(n_, 0);
    std::int64_t peak = 0;
    const auto step = [&](std::size_t i) {
      peak = std::max(peak, least([&](std::size_t p) { return level[p] + ops(p)[i].transient_bytes; }));
      for (std::size_t p = 0; p < n_; ++p) {
        level[p] += ops(p)[i].retained_bytes;
        if (ops(p)[i].kind == OpKind::Recompute) recompute[p] += ops(p)[i].duration_ns;
      }
      peak = std::max(peak, least([&](std::size_t p) { return level[p]; }));
    };
    const std::vector<Op>& stage_shape = ops(0);
    std::size_t i = 0;
    for (; i < stage_shape.size() && (stage_shape[i].kind == OpKind::Forward || stage_shape[i].kind == OpKind::ForwardNoGrad); ++i) {
      step(i);
    }
    stage.checkpointed_bytes = least([&](std::size_t p) { return level[p]; });
    for (std::size_t p = 0; p < n_; ++p) {
      level[p] = stored(p).before[span.backward_start] - stored(p).before[span.start] - (stored_bytes(span, p) - level[p]);
    }
    for (; i < stage_shape.size(); ++i) step(i);
    stage.checkpointed_peak = peak;
    stage.recompute_ns = least([&](std::size_t p) { return recompute[p]; });
  }

  const LayerGraph& graph_;
  const std::vector<const ChainWalks*>& points_;
  const std::size_t n_;
  const std::vector<Op>& shape_;  // every point's ops are the same ops
  const std::size_t layers_;
};

ChainAndWalk chain_over(const LayerGraph& graph, const std::vector<const ChainWalks*>& points, bool stages) {
  return ChainOverPoints(graph, points).chain_and_walk(stages);
}

}  // namespace

namespace {

// The micro_batch_error of the trace's i-th profiled size: the larger of its standard and Tempo steps'.
double size_error(const core::Trace& trace, std::size_t i) {
  double error = 0;
  for (const auto* steps : {&trace.steps, &trace.tempo_steps}) {
    if (i < steps->size() && (*steps)[i].sequence) error = std::max(error, (*steps)[i].sequence->micro_batch_error);
  }
  return error;
}

}  // namespace

double micro_batch_error_at(const core::Trace& trace, std::int64_t size) {
  const std::vector<std::int64_t>& sizes = trace.batch_sizes;
  if (sizes.empty()) return 0;
  const auto upper = std::lower_bound(sizes.begin(), sizes.end(), size);
  const std::size_t hi = upper == sizes.end() ? sizes.size() - 1 : static_cast<std::size_t>(upper - sizes.begin());
  const bool profiled = upper != sizes.end() && *upper == size;
  const std::size_t lo = profiled || hi == 0 ? hi : hi - 1;
  return std::max(size_error(trace, lo), size_error(trace, hi));
}

double timing_resolution(double error_a, double error_b) { return 2 * std::hypot(error_a, error_b); }

double timing_resolution(const core::Trace& trace) {
  double largest = 0;
  for (std::size_t i = 0; i < trace.batch_sizes.size(); ++i) largest = std::max(largest, size_error(trace, i));
  return timing_resolution(largest, largest);
}

Chain checkpoint_chain(const core::CostModel& costs, const LayerGraph& graph, std::int64_t batch,
                       const core::StepChoice& variants, BatchCostsCache* cache) {
  std::optional<BatchCosts> made;
  if (cache == nullptr || &cache->costs() != &costs) made = batch_costs(costs, batch);
  const BatchCosts& batch_cost = made ? *made : cache->at(batch);
  const ChainWalks walks = chain_walks(costs, graph, batch_cost, variants, true);
  return chain_over(graph, {&walks}, true).chain;
}

namespace {

// A choice with only `c`'s data-parallel settings (the workers and their ring loss).
core::StepChoice data_parallel_only(const core::StepChoice& c) {
  core::StepChoice out;
  out.data_parallel = c.data_parallel;
  out.ring_loss = c.ring_loss;
  return out;
}

// `count` micro-batches of `samples` as split_batch makes them, as runs: a split of a large batch
// is weighed without listing its micro-batches.
StepBatches even_split(std::int64_t samples, std::int64_t count) {
  StepBatches batches;
  batches.samples = samples;
  const std::int64_t q = samples / count, r = samples % count;
  if (r > 0) batches.runs.push_back({q + 1, r});
  if (count > r) batches.runs.push_back({q, count - r});
  return batches;
}

std::int64_t micro_batch_count(const StepBatches& batches) {
  std::int64_t count = 0;
  for (const auto& run : batches.runs) count += run.count;
  return count;
}

std::vector<std::int64_t> listed(const StepBatches& batches) {
  std::vector<std::int64_t> sizes;
  sizes.reserve(static_cast<std::size_t>(micro_batch_count(batches)));
  for (const auto& run : batches.runs) sizes.insert(sizes.end(), static_cast<std::size_t>(run.count), run.size);
  return sizes;
}

struct Candidate {
  // Its layer variants as they take effect (effective_variants). Its micro-batches are `batches`
  // (an L2L candidate's are listed in it too, as L2L's model reads them there): with_listed
  // lists them for the plan.
  core::StepChoice choice;
  StepBatches batches;
  StepPrediction prediction;
  std::int64_t largest_micro_batch() const { return batches.runs.front().size; }
  std::int64_t micro_batch_count() const { return planner::micro_batch_count(batches); }
  core::StepChoice with_listed() const {
    core::StepChoice out = choice;
    out.micro_batches = listed(batches);
    return out;
  }
  int checkpointed_count() const { return static_cast<int>(choice.checkpointed_blocks.size()); }
  int tempo_count() const { return choice.tempo_count(); }
  double samples_per_second(std::int64_t global_batch) const {
    return static_cast<double>(global_batch) * 1e9 / static_cast<double>(prediction.step_ns);
  }
};

// Tempo's layers in the order to turn them on: least extra time per byte saved first (the
// greedy order for a knapsack of independent choices); those measured no slower than the standard
// layer come first, as `free` of them. A layer that saves nothing at this size is left out.
struct TempoOrder {
  std::vector<int> layers;
  std::size_t free = 0;
};

TempoOrder tempo_order(const LayerGraph& graph, BatchCostsCache& cache, std::int64_t batch) {
  const BatchCosts& c = cache.at(batch);
  struct Entry {
    int layer;
    std::int64_t saved;
    std::int64_t extra_ns;
  };
  std::vector<Entry> entries;
  for (const int i : graph.tempo_candidates()) {
    const auto& standard = c.layers[static_cast<std::size_t>(i)];
    const auto& tempo = c.tempo[static_cast<std::size_t>(i)];
    const std::int64_t saved = tempo_saved_bytes(c, graph, i);
    if (saved <= 0) continue;
    entries.push_back({i, saved, tempo.fwd_ns + tempo.bwd_ns - standard.fwd_ns - standard.bwd_ns});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    // a.extra/a.saved < b.extra/b.saved without division (saved > 0).
    return static_cast<double>(a.extra_ns) * static_cast<double>(b.saved) <
           static_cast<double>(b.extra_ns) * static_cast<double>(a.saved);
  });
  TempoOrder order;
  for (const auto& e : entries) {
    order.layers.push_back(e.layer);
    order.free += e.extra_ns <= 0;
  }
  return order;
}

// `choice` with the first `count` layers of `order` as Tempo layers and every other layer standard.
core::StepChoice with_tempo_prefix(core::StepChoice choice, const std::vector<int>& order, std::size_t count) {
  for (auto& layer : choice.layers) layer.variant = core::LayerVariant::Standard;
  for (std::size_t k = 0; k < count && k < order.size(); ++k) choice.set_variant(order[k], core::LayerVariant::Tempo);
  return choice;
}

// Block ids of the flagged stages of the graph's chain.
std::vector<int> block_ids(const LayerGraph& graph, const std::vector<bool>& flags) {
  std::vector<int> ids;
  for (std::size_t k = 0; k < flags.size(); ++k) {
    if (flags[k]) ids.push_back(graph.blocks()[k].block);
  }
  return ids;
}

// The fastest checkpointing for these micro-batches and Tempo layers under `limit`, or nothing.
std::optional<Candidate> fit_checkpointing(const core::CostModel& costs, const LayerGraph& graph, BatchCostsCache& cache,
                                           const core::StepChoice& start, const StepBatches& batches, std::int64_t limit) {
  if (graph.blocks().empty()) return std::nullopt;
  Candidate c{start, batches, {}};
  const Chain chain = checkpoint_chain(costs, graph, c.largest_micro_batch(), start, &cache);
  std::int64_t total = 0;
  for (const auto& s : chain.stages) total += std::max(s.stored_bytes, s.checkpointed_bytes);
  const std::int64_t unit = std::max<std::int64_t>(1, total / 4096);
  // The chain is a model of the exact walk; if its answer overshoots, ask again with less room.
  std::int64_t dp_limit = limit;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const ChainSolution solution = solve_checkpoint_dp(chain, dp_limit, unit);
    if (!solution.feasible) return std::nullopt;
    c.choice.checkpointed_blocks = block_ids(graph, solution.checkpoint);
    c.choice = effective_variants(graph, std::move(c.choice));
    c.prediction = predict_step(costs, graph, c.choice, c.batches, &cache);
    if (c.prediction.peak_bytes <= limit) return c;
    dp_limit -= c.prediction.peak_bytes - limit;
  }
  return std::nullopt;
}

// L2L for these micro-batches (standard layers, nothing checkpointed): stage boundaries on
// the device where that fits, else on the host (constant memory in depth), or nothing. Where the
// whole model offloaded fits, so may L2L from a later block on (the stages before it kept on the
// device, with no copies and their optimizer there): the fastest of those that fit, the whole
// model's on a tie (it leaves the device the most room).
std::optional<Candidate> fit_l2l(const core::CostModel& costs, const LayerGraph& graph, const Candidate& split,
                                 std::int64_t limit, std::int64_t host_memory) {
  if (split.micro_batch_count() > static_cast<std::int64_t>(kMaxL2LMicroBatches)) return std::nullopt;
  const core::StepChoice plain = split.with_listed();
  const auto fits = [&](const L2LPrediction& p) {
    return p.device_peak_bytes <= limit && (host_memory <= 0 || p.host_bytes <= host_memory);
  };
  for (const bool on_host : {false, true}) {
    core::L2LChoice l2l{on_host};
    auto best = predict_l2l_step(costs, graph, plain.micro_batches, l2l);
    if (!fits(best)) continue;
    for (const auto& stage : l2l_stage_costs(costs.trace())) {
      const int block = costs.trace().layers[static_cast<std::size_t>(stage.first)].block;
      if (block < 0 || stage.first == 0) continue;
      const core::L2LChoice later{on_host, block};
      const auto p = predict_l2l_step(costs, graph, plain.micro_batches, later);
      if (fits(p) && p.step_ns < best.step_ns) best = p, l2l = later;
    }
    Candidate c{plain, split.batches, {best.device_peak_bytes, best.step_ns, best.peak_at}};
    c.choice.checkpointed_blocks.clear();
    for (auto& layer : c.choice.layers) layer.variant = core::LayerVariant::Standard;
    c.choice.l2l = l2l;
    return c;
  }
  return std::nullopt;
}

// The fewest of `order`'s first layers as Tempo layers (but at least its free ones) that still fit `c`'s
// checkpointing under `limit` (c fits with all of them). Past the free ones, fewer cost less time.
void trim_tempo(const core::CostModel& costs, const LayerGraph& graph, BatchCostsCache& cache, const TempoOrder& order,
               std::int64_t limit, Candidate& c) {
  std::size_t lo = order.free, hi = order.layers.size();
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    const auto p = predict_step(costs, graph, effective_variants(graph, with_tempo_prefix(c.choice, order.layers, mid)), c.batches, &cache);
    if (p.peak_bytes <= limit) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  c.choice = effective_variants(graph, with_tempo_prefix(std::move(c.choice), order.layers, hi));
  c.prediction = predict_step(costs, graph, c.choice, c.batches, &cache);
}

// The fastest way to fit these micro-batches under `limit` with the allowed strategies, or
// nothing: as they are; with Tempo layers (those measured no slower always, the others as
// needed); with checkpointing, of the standard layers or of the Tempo ones (a checkpointed block
// recomputes standard layers).
std::optional<Candidate> fit(const core::CostModel& costs, const LayerGraph& graph, BatchCostsCache& cache,
                             const StepBatches& micro, std::int64_t limit, const SearchSpace& space) {
  if (!space.loss_options.empty()) {
    // The loss and the towers' micro-batches are chosen together: the fastest pair that fits.
    std::optional<Candidate> best;
    SearchSpace one = space;
    one.loss_options.clear();
    for (const auto& tiles : space.loss_options) {
      one.tiles = tiles;
      auto c = fit(costs, graph, cache, micro, limit, one);
      if (c && (!best || c->prediction.step_ns < best->prediction.step_ns)) best = std::move(c);
    }
    return best;
  }
  Candidate plain;
  plain.choice = space.base;
  plain.batches = micro;
  plain.choice.loss_tiles = space.tiles;
  plain.prediction = predict_step(costs, graph, plain.choice, plain.batches, &cache);
  const bool plain_fits = plain.prediction.peak_bytes <= limit;
  if (plain_fits && !space.tempo) return plain;

  std::optional<Candidate> best;
  const auto consider = [&best](Candidate c) {
    if (!best || c.prediction.step_ns < best->prediction.step_ns) best = std::move(c);
  };
  if (plain_fits) consider(plain);
  const TempoOrder order = space.tempo ? tempo_order(graph, cache, plain.largest_micro_batch()) : TempoOrder{};
  const auto all_tempo = with_tempo_prefix(plain.choice, order.layers, order.layers.size());
  if (!order.layers.empty()) {
    Candidate c{all_tempo, plain.batches, predict_step(costs, graph, all_tempo, plain.batches, &cache)};
    if (c.prediction.peak_bytes <= limit) {
      trim_tempo(costs, graph, cache, order, limit, c);
      consider(std::move(c));
    }
  }
  // Checkpointing only adds time where the step fits without it.
  if (space.checkpointing && !plain_fits) {
    if (auto c = fit_checkpointing(costs, graph, cache, plain.choice, plain.batches, limit)) consider(std::move(*c));
    if (!order.layers.empty()) {
      if (auto c = fit_checkpointing(costs, graph, cache, all_tempo, plain.batches, limit)) {
        trim_tempo(costs, graph, cache, order, limit, *c);
        consider(std::move(*c));
      }
    }
  }
  // L2L runs every block's forward twice, so it is never faster than the same split as it is.
  if (space.l2l && !plain_fits) {
    if (auto c = fit_l2l(costs, graph, plain, limit, space.host_memory)) consider(std::move(*c));
  }
  return best;
}

core::PlanPrediction predicted(const Candidate& c, std::int64_t global_batch) {
  return {c.prediction.peak_bytes, static_cast<double>(c.prediction.step_ns) / 1e9, c.samples_per_second(global_batch)};
}

MicroBatchSizes sizes_of(const StepBatches& batches) {
  return {micro_batch_count(batches), batches.runs.front().size, batches.runs.back().size};
}

WeighedStep weighed(const Candidate& c, std::int64_t global_batch) {
  return {sizes_of(c.batches), c.checkpointed_count(), c.tempo_count(), predicted(c, global_batch), c.choice.l2l};
}

// Whether `a` is preferred to `b` where their speeds are a tie to the trace (timing_resolution): the
// less work first (fewer checkpointed blocks to run again, fewer Tempo layers), then larger
// micro-batches (nearer the whole batch's statistics), fewer of them, then the faster.
bool preferred_on_a_tie(const Candidate& a, const Candidate& b) {
  const auto order = [](const Candidate& c) {
    return std::make_tuple(c.checkpointed_count(), c.tempo_count(), -c.largest_micro_batch(), c.micro_batch_count(),
                           c.prediction.step_ns);
  };
  return order(a) < order(b);
}

// The least samples/s that ties with `fastest` at `resolution`.
double least_tied_rate(double fastest, double resolution) { return fastest * (1 - resolution); }

// The error of the times a candidate's step is predicted from: its micro-batch sizes' (micro_batch_error_at).
double candidate_error(const core::Trace& trace, const Candidate& c) {
  double error = 0;
  for (const auto& run : c.batches.runs) error = std::max(error, micro_batch_error_at(trace, run.size));
  return error;
}

// Of `fits`, fastest first: the one taken (preferred_on_a_tie among those that tie with the first),
// and the resolution it tied at (0 where it is the fastest).
std::pair<std::size_t, double> taken_on_a_tie(const core::Trace& trace, const std::vector<Candidate>& fits, std::int64_t global_batch) {
  const double fastest = fits.front().samples_per_second(global_batch);
  const double fastest_error = candidate_error(trace, fits.front());
  std::pair<std::size_t, double> taken{0, 0.0};
  for (std::size_t k = 1; k < fits.size(); ++k) {
    const double resolution = timing_resolution(fastest_error, candidate_error(trace, fits[k]));
    if (fits[k].samples_per_second(global_batch) >= least_tied_rate(fastest, resolution) &&
        preferred_on_a_tie(fits[k], fits[taken.first])) {
      taken = {k, resolution};
    }
  }
  return taken;
}

}  // namespace

namespace {

// Splits of the global batch, fewest micro-batches first: the fastest way each fits, or its plain
// prediction when it does not.
struct Weighing {
  std::vector<Candidate> fits;       // fewest micro-batches first
  std::vector<SplitOutcome> splits;
};

// One split weighed: `count` micro-batches of the global batch. Where it is known not to fit, only
// its plain prediction is made.
struct WeighedSplit {
  SplitOutcome outcome;
  std::optional<Candidate> fit;
};

WeighedSplit weigh_split(const core::CostModel& costs, const LayerGraph& graph, BatchCostsCache& cache, std::int64_t global_batch,
                         std::int64_t count, const SearchSpace& space, bool known_not_to_fit = false) {
  const std::int64_t size = (global_batch + count - 1) / count;
  const StepBatches micro = even_split(global_batch, count);
  if (!known_not_to_fit) {
    if (auto c = fit(costs, graph, cache, micro, space.limit, space)) {
      return {{size, count, true, c->checkpointed_count(), c->tempo_count(), predicted(*c, global_batch)}, std::move(c)};
    }
  }
  Candidate plain;
  plain.choice = space.base;
  plain.batches = micro;
  plain.prediction = predict_step(costs, graph, plain.choice, plain.batches, &cache);
  return {{size, count, false, 0, 0, predicted(plain, global_batch)}, std::nullopt};
}

// Every split, one per distinct largest micro-batch.
Weighing weigh_splits(const core::CostModel& costs, const LayerGraph& graph, BatchCostsCache& cache, std::int64_t global_batch,
                      const SearchSpace& space) {
  Weighing out;
  std::int64_t previous_size = -1;
  const std::int64_t max_count = space.micro_batching ? global_batch : 1;
  for (std::int64_t n = 1; n <= max_count; ++n) {
    const std::int64_t size = (global_batch + n - 1) / n;
    if (size == previous_size) continue;
    previous_size = size;
    WeighedSplit weighed = weigh_split(costs, graph, cache, global_batch, n, space);
    out.splits.push_back(weighed.outcome);
    if (weighed.fit) out.fits.push_back(std::move(*weighed.fit));
  }
  return out;
}

// The number of distinct splits: one per distinct ceil(B / n), about 2 sqrt(B).
std::int64_t split_count(std::int64_t global_batch) {
  std::int64_t count = 0;
  for (std::int64_t n = 1; n <= global_batch; ++count) {
    const std::int64_t size = (global_batch + n - 1) / n;
    if (size == 1) return count + 1;
    n = (global_batch + size - 2) / (size - 1);  // the fewest micro-batches none larger than size - 1
  }
  return count;
}

// Up to this many splits each is weighed (the chart shows them all); past it, weigh_bounded, whose
// bounds cost about as much as weighing each split near this count (docs/results.md, "Re-planning in
// the desktop app").
constexpr std::int64_t kSplitsWeighedEach = 24;
// The chosen plan and the runner-ups it names.
constexpr std::size_t kRunnerUps = 3;

// Whether split_bounds.h bounds what fit() may find for this space: micro-batching, checkpointing
// and Tempo, on one worker or several. A contrastive model's loss and L2L are not bounded.
bool bounded_search_applies(const SearchSpace& space) {
  return space.micro_batching && space.loss_options.empty() && !space.tiles && !space.l2l;
}

// What weigh_splits finds of the plan's choices, weighing only splits that may matter: the plan
// is the fastest split that fits (fewer micro-batches on a tie), its explanation names the kRunnerUps
// next fastest and the split with the largest micro-batches that fits. Ranges of largest
// micro-batch sizes are set aside whole where split_bounds.h shows that no split in them fits, or
// that none can be faster than the kRunnerUps + 1 fastest found; the rest are halved down to single
// splits, which fit() weighs as weigh_splits does. The bounds are lower bounds, never estimates, so
// every split set aside is one weigh_splits would not have chosen or named: the plans are the same.
// The splits returned are those weighed, and for the chart one near each power of two.
class BoundedWeighing {
 public:
  BoundedWeighing(const core::CostModel& costs, const LayerGraph& graph, BatchCostsCache& cache, std::int64_t global_batch,
                  const SearchSpace& space, const std::function<double(std::int64_t)>& rate_of)
      : costs_(costs),
        graph_(graph),
        cache_(cache),
        batch_(global_batch),
        space_(space),
        rate_of_(rate_of),
        chains_(space.checkpointing && !graph.blocks().empty()),
        candidates_(graph.tempo_candidates()),
        rounding_(level_rounding_bytes(graph)),
        resolution_(timing_resolution(costs.trace())) {}

  Weighing run() {
    find_largest_fitting();
    find_fastest();
    weigh_for_chart();
    Weighing out;
    for (auto it = weighed_.rbegin(); it != weighed_.rend(); ++it) {
      out.splits.push_back(it->second.outcome);
      if (it->second.fit) out.fits.push_back(std::move(*it->second.fit));
    }
    return out;
  }

 private:
  // What one size brings to the bounds of the ranges it ends, made once: its batch costs, and its
  // walks with standard layers and with the layers fit() makes Tempo layers at that size (tempo_order's).
  struct SizePoint {
    BatchCosts costs;
    bool walked = false;
    ChainWalks standard;
    std::vector<std::int64_t> saved;  // by Tempo candidate: the bytes it saves as one
    std::vector<int> tempo;           // those that save some
    ChainWalks tempo_walks;           // when `tempo` is not empty
    // At most the least peak of any way fit() may run a split of this size (for an estimate).
    std::int64_t least_peak = 0;
  };
  struct RangeBound {
    SizeRange range;
    bool may_fit = true;
    double least_ns = -std::numeric_limits<double>::infinity();  // of any split in it that fits
  };
  // What the chains at a range's two ends allow fit() to do with its splits.
  struct FitAtEnds {
    bool as_it_is = false;                     // some split may fit without checkpointing
    std::optional<std::int64_t> checkpointed;  // the least recompute of a checkpointing that fits
  };
  // A range still to bound in phase 1.
  struct Pending {
    SizeRange range;
    int walk_down = 0;  // single splits still to weigh from its top before bounding it again
  };
  static constexpr int kWalkDown = 4;

  std::int64_t count_of(std::int64_t size) const { return (batch_ + size - 1) / size; }
  std::int64_t size_of(std::int64_t count) const { return (batch_ + count - 1) / count; }

  // A range narrowed to the largest micro-batches of splits (lo > hi when it holds none): the
  // largest at most hi is that of ceil(B / hi) micro-batches, the least at least lo that of the
  // most micro-batches whose largest is still lo or more.
  SizeRange narrowed(SizeRange r) const {
    if (r.lo > batch_ || r.lo > r.hi) return SizeRange{1, 0};
    const std::int64_t lo = r.lo <= 1 ? 1 : size_of((batch_ + r.lo - 2) / (r.lo - 1) - 1);
    return SizeRange{lo, size_of(count_of(std::min(r.hi, batch_)))};
  }
  // Halved geometrically: the sizes span orders of magnitude.
  static std::array<SizeRange, 2> halves(SizeRange r) {
    auto mid = static_cast<std::int64_t>(std::sqrt(static_cast<double>(r.lo) * static_cast<double>(r.hi)));
    mid = std::clamp(mid, r.lo, r.hi - 1);
    return std::array<SizeRange, 2>{SizeRange{r.lo, mid}, SizeRange{mid + 1, r.hi}};
  }

  const WeighedSplit& weigh(std::int64_t size, bool known_not_to_fit = false) {
    auto it = weighed_.find(size);
    if (it == weighed_.end()) {
      it = weighed_.emplace(size, weigh_split(costs_, graph_, cache_, batch_, count_of(size), space_, known_not_to_fit)).first;
    }
    return it->second;
  }

  const SizePoint& point(std::int64_t size, bool walked);
  std::int64_t least_peak_of(const ChainWalks& walks) const;
  RangeBound bound(SizeRange r, bool timed);
  FitAtEnds fit_at_ends(const SizePoint& lo, const SizePoint& hi, bool one, const TimeBound& time) const;
  void weigh_walks(FitAtEnds& ends, const ChainWalks& at_lo, const ChainWalks& at_hi, bool one, const TimeBound& time) const;
  void find_largest_fitting();
  void bound_pending(const Pending& next);
  double slowest_of_fastest() const;
  void find_fastest();
  void weigh_for_chart();

  const core::CostModel& costs_;
  const LayerGraph& graph_;
  BatchCostsCache& cache_;
  const std::int64_t batch_;
  const SearchSpace& space_;
  const std::function<double(std::int64_t)>& rate_of_;
  const bool chains_;
  const std::vector<int> candidates_;
  const std::int64_t rounding_;
  const double resolution_;
  std::map<std::int64_t, WeighedSplit> weighed_;  // by largest micro-batch
  std::map<std::int64_t, SizePoint> points_;      // by size; a map's entries stay where they are
  std::vector<SizeRange> set_aside_;              // no split in them fits
  std::vector<Pending> pending_;                  // the largest last
};

const BoundedWeighing::SizePoint& BoundedWeighing::point(std::int64_t size, bool walked) {
  auto it = points_.find(size);
  if (it == points_.end()) {
    it = points_.emplace(size, SizePoint{}).first;
    it->second.costs = cache_.at(size);
  }
  SizePoint& at = it->second;
  if (walked && !at.walked) {
    at.walked = true;
    at.standard = chain_walks(costs_, graph_, at.costs, space_.base, chains_);
    if (space_.tempo) {
      for (const int i : candidates_) {
        at.saved.push_back(tempo_saved_bytes(at.costs, graph_, i));
        if (at.saved.back() > 0) at.tempo.push_back(i);
      }
      if (!at.tempo.empty()) {
        at.tempo_walks = chain_walks(costs_, graph_, at.costs, with_tempo_prefix(space_.base, at.tempo, at.tempo.size()), chains_);
      }
    }
    at.least_peak = least_peak_of(at.standard);
    if (!at.tempo.empty()) at.least_peak = std::min(at.least_peak, least_peak_of(at.tempo_walks));
  }
  return at;
}

std::int64_t BoundedWeighing::least_peak_of(const ChainWalks& walks) const {
  const ChainAndWalk over = chain_over(graph_, {&walks}, chains_);
  return chains_ ? std::min(over.walk_peak, least_chain_peak_bound(over.chain)) : over.walk_peak;
}

BoundedWeighing::RangeBound BoundedWeighing::bound(SizeRange r, bool timed) {
  RangeBound b{r};
  const SizePoint& lo = point(r.lo, true);
  const SizePoint& hi = point(r.hi, true);
  // The smaller micro-batches of a split are one sample smaller than its largest.
  const TimeBound time =
      timed ? time_bound(costs_, graph_, point(std::max<std::int64_t>(1, r.lo - 1), false).costs, hi.costs) : TimeBound{};
  std::int64_t recompute = 0;  // by each micro-batch of a split that fits, at least
  const bool one = r.lo == r.hi;
  if (one || bytes_unbent(costs_, lo.costs, hi.costs)) {
    const FitAtEnds ends = fit_at_ends(lo, hi, one, time);
    b.may_fit = ends.as_it_is || ends.checkpointed.has_value();
    recompute = ends.as_it_is ? 0 : ends.checkpointed.value_or(0);
  }
  if (time.valid) {
    // Each of a split's n micro-batches: its samples at sample_ns, less the slack, and its
    // recompute; then the optimizer. Least at the range's fewest or most micro-batches.
    const double per_micro_batch = static_cast<double>(recompute) - time.micro_batch_slack_ns;
    b.least_ns = time.sample_ns * static_cast<double>(batch_) + static_cast<double>(worker_optimizer_ns(costs_, space_.base)) +
                 std::min(static_cast<double>(count_of(r.hi)) * per_micro_batch, static_cast<double>(count_of(r.lo)) * per_micro_batch);
  }
  return b;
}

// fit() keeps a split as it is (with Tempo layers or not) where its walk fits, and
// otherwise checkpoints it as solve_checkpoint_dp answers for its chain (of standard layers, and
// of every Tempo layer): what no choice of its chain fits, it cannot.
BoundedWeighing::FitAtEnds BoundedWeighing::fit_at_ends(const SizePoint& lo, const SizePoint& hi, bool one,
                                                        const TimeBound& time) const {
  FitAtEnds ends;
  weigh_walks(ends, lo.standard, hi.standard, one, time);
  if (space_.tempo) {
    // The Tempo layers at the range's ends are those throughout where each saves clearly more
    // than 0 at both, or clearly not: saved bytes are a sum of a few rounded counts.
    bool known = lo.tempo == hi.tempo;
    for (std::size_t c = 0; c < lo.saved.size() && known && !one; ++c) {
      const auto margin = 3 + static_cast<std::int64_t>(graph_.released_inputs(candidates_[c]).size());
      known = (lo.saved[c] > margin && hi.saved[c] > margin) || (lo.saved[c] <= -margin && hi.saved[c] <= -margin);
    }
    if (!known) {
      ends.as_it_is = true;
    } else if (!lo.tempo.empty()) {
      weigh_walks(ends, lo.tempo_walks, hi.tempo_walks, one, time);
    }
  }
  return ends;
}

// The chain over a range's ends, each number lowered by the rounding its levels may carry (none at
// a single size).
void BoundedWeighing::weigh_walks(FitAtEnds& ends, const ChainWalks& at_lo, const ChainWalks& at_hi, bool one,
                                  const TimeBound& time) const {
  const std::int64_t slack = one ? 0 : rounding_;
  const ChainAndWalk over = chain_over(graph_, one ? std::vector<const ChainWalks*>{&at_lo} : std::vector<const ChainWalks*>{&at_lo, &at_hi}, chains_);
  ends.as_it_is = ends.as_it_is || over.walk_peak - slack <= space_.limit;
  if (!chains_) return;
  Chain low = over.chain;
  low.base -= slack;
  low.tail_peak -= slack;
  for (std::size_t k = 0; k < low.stages.size(); ++k) {
    ChainStage& stage = low.stages[k];
    stage.stored_bytes -= slack;
    stage.checkpointed_bytes -= slack;
    stage.stored_peak -= slack;
    stage.checkpointed_peak -= slack;
    stage.recompute_ns = time.valid ? time.block_recompute_ns[k] : 0;
  }
  if (const auto least = least_recompute_bound(low, space_.limit)) {
    ends.checkpointed = std::min(ends.checkpointed.value_or(*least), *least);
  }
}

// 1. The largest micro-batches that fit, from the largest sizes down. A range that may hold it is
// cut where the least peak its ends allow crosses the limit (that peak grows about linearly with
// the size), so the part above is set aside at once and the part below ends near the answer; from
// a top that may fit, single splits are weighed downwards, a few before halving.
void BoundedWeighing::find_largest_fitting() {
  for (const SizeRange r : affine_ranges(costs_, batch_)) pending_.push_back({r});
  while (!pending_.empty()) {
    const Pending next = pending_.back();
    const SizeRange r = narrowed(next.range);
    pending_.pop_back();
    if (r.lo > r.hi) continue;
    if (r.lo == r.hi) {
      if (weigh(r.lo).fit) break;
      continue;
    }
    bound_pending({r, next.walk_down});
  }
}

// A pending range of more than one size: its top weighed next, or its parts pending again.
void BoundedWeighing::bound_pending(const Pending& next) {
  const SizeRange r = next.range;
  const SizeRange below_top{r.lo, r.hi - 1};
  if (next.walk_down > 0) {
    pending_.push_back({below_top, next.walk_down - 1});
    pending_.push_back({{r.hi, r.hi}});
    return;
  }
  if (!bound(r, false).may_fit) {
    set_aside_.push_back(r);
    return;
  }
  const std::int64_t at_lo = point(r.lo, true).least_peak, at_hi = point(r.hi, true).least_peak;
  if (at_hi <= space_.limit) {
    pending_.push_back({below_top, kWalkDown - 1});
    pending_.push_back({{r.hi, r.hi}});
  } else if (at_lo <= space_.limit) {
    const double across = static_cast<double>(space_.limit - at_lo) / static_cast<double>(at_hi - at_lo);
    const auto cut = std::clamp(r.lo + static_cast<std::int64_t>(across * static_cast<double>(r.hi - r.lo)), r.lo, r.hi - 1);
    pending_.push_back({{r.lo, cut}});
    pending_.push_back({{cut + 1, r.hi}, 0});
  } else {
    for (const SizeRange half : halves(r)) pending_.push_back({half});
  }
}

// The rate of the (kRunnerUps + 1)th fastest split found that fits, 0 while fewer fit.
double BoundedWeighing::slowest_of_fastest() const {
  std::vector<double> rates;
  for (const auto& [size, w] : weighed_) {
    if (w.fit) rates.push_back(rate_of_(w.fit->prediction.step_ns));
  }
  if (rates.size() <= kRunnerUps) return 0.0;
  std::nth_element(rates.begin(), rates.begin() + kRunnerUps, rates.end(), std::greater<>());
  // A split that ties with the fastest may be the one chosen (taken_on_a_tie): none ties wider.
  const double fastest = *std::max_element(rates.begin(), rates.end());
  return std::min(rates[kRunnerUps], least_tied_rate(fastest, resolution_));
}

// 2. The fastest: ranges by the least time their splits can take, until even that is slower (by
// samples/s, as plan_step ranks them) than the kRunnerUps + 1 fastest found and than a tie with the
// fastest, which no split set aside can then be among or be.
void BoundedWeighing::find_fastest() {
  const auto later = [](const RangeBound& a, const RangeBound& b) { return a.least_ns > b.least_ns; };
  std::priority_queue<RangeBound, std::vector<RangeBound>, decltype(later)> queue(later);
  const auto enqueue = [&](SizeRange r) {
    r = narrowed(r);
    if (r.lo > r.hi) return;
    RangeBound b = bound(r, true);
    if (b.may_fit) {
      queue.push(b);
    } else {
      set_aside_.push_back(r);
    }
  };
  for (const Pending& p : pending_) enqueue(p.range);
  while (!queue.empty()) {
    const RangeBound next = queue.top();
    // A split's step takes at least the bound rounded up to whole ns (with room for the bound's
    // floating point): its rate is at most that step's, and a strictly lower rate ranks after.
    const double least = std::ceil(next.least_ns * (1 - 1e-12) - 1);
    if (least >= 1 && least < 0x1p62 && rate_of_(static_cast<std::int64_t>(least)) < slowest_of_fastest()) break;
    queue.pop();
    if (next.range.lo == next.range.hi) {
      weigh(next.range.lo);
    } else {
      for (const SizeRange half : halves(next.range)) enqueue(half);
    }
  }
}

// 3. For the chart, a split near each power of two (and the whole batch): those set aside as too
// large to fit get their plain prediction only.
void BoundedWeighing::weigh_for_chart() {
  const auto aside = [&](std::int64_t size) {
    return std::any_of(set_aside_.begin(), set_aside_.end(), [size](const SizeRange& r) { return r.lo <= size && size <= r.hi; });
  };
  for (std::int64_t target = 1;; target = std::min(target * 2, batch_)) {
    const std::int64_t size = size_of(count_of(target));
    weigh(size, aside(size));
    if (target == batch_) break;
  }
}

Weighing weigh_bounded(const core::CostModel& costs, const LayerGraph& graph, BatchCostsCache& cache, std::int64_t global_batch,
                       const SearchSpace& space, const std::function<double(std::int64_t)>& rate_of) {
  return BoundedWeighing(costs, graph, cache, global_batch, space, rate_of).run();
}

// The least peak at one split without checkpointing: as it is, with every Tempo layer, and (for a
// contrastive model) with each loss option.
std::int64_t least_unchecked_peak(const core::CostModel& costs, const LayerGraph& graph, BatchCostsCache& cache,
                                  const StepBatches& micro, const SearchSpace& space) {
  std::vector<std::optional<core::LossTiles>> losses = space.loss_options;
  if (losses.empty()) losses.push_back(space.tiles);
  std::int64_t least = std::numeric_limits<std::int64_t>::max();
  const std::vector<int> order = space.tempo ? tempo_order(graph, cache, micro.runs.front().size).layers : std::vector<int>{};
  for (const auto& tiles : losses) {
    core::StepChoice plain = space.base;
    plain.loss_tiles = tiles;
    least = std::min(least, predict_step(costs, graph, plain, micro, &cache).peak_bytes);
    if (space.tempo) {
      least = std::min(least, predict_step(costs, graph, with_tempo_prefix(plain, order, order.size()), micro, &cache).peak_bytes);
    }
  }
  return least;
}

// The split whose peak is least. Finer splits hold less, except under the gradient cache, which
// keeps every micro-batch's RNG state and embeddings: there the peak falls and then rises with the
// count, so the counts are walked on a coarse grid and the best one's neighbours.
StepBatches least_split(const core::CostModel& costs, const LayerGraph& graph, BatchCostsCache& cache,
                        std::int64_t global_batch, const SearchSpace& space) {
  const std::int64_t finest = space.micro_batching ? global_batch : 1;
  if (space.loss_options.empty() && !space.tiles) return even_split(global_batch, finest);
  const auto peak_of = [&](std::int64_t count) {
    return least_unchecked_peak(costs, graph, cache, even_split(global_batch, count), space);
  };
  std::int64_t best = finest, best_peak = peak_of(finest);
  for (std::int64_t count = 1; count < finest; count = std::max(count + 1, count * 5 / 4)) {
    if (const std::int64_t p = peak_of(count); p < best_peak) best = count, best_peak = p;
  }
  for (const std::int64_t step : {std::int64_t{-1}, std::int64_t{1}}) {
    for (std::int64_t count = best + step; count >= 1 && count <= finest; count += step) {
      const std::int64_t p = peak_of(count);
      if (p >= best_peak) break;
      best = count, best_peak = p;
    }
  }
  return even_split(global_batch, best);
}

// The least peak the allowed strategies reach: the smallest micro-batches, and the least limit
// under which some checkpointing of them fits (found by bisection).
std::int64_t least_peak(const core::CostModel& costs, const LayerGraph& graph, BatchCostsCache& cache, std::int64_t global_batch,
                        const SearchSpace& space) {
  const StepBatches micro = least_split(costs, graph, cache, global_batch, space);
  std::int64_t least = least_unchecked_peak(costs, graph, cache, micro, space);
  if (space.l2l) {
    // L2L's least: its finest split, boundaries on the host (where the host holds them).
    const auto finest = split_batch(global_batch, std::min<std::int64_t>(global_batch, kMaxL2LMicroBatches));
    const auto p = predict_l2l_step(costs, graph, finest, core::L2LChoice{true});
    if (space.host_memory <= 0 || p.host_bytes <= space.host_memory) least = std::min(least, p.device_peak_bytes);
  }
  if (!space.checkpointing) return least;
  std::int64_t lo = std::min(worker_static_bytes(costs, space.base), least), hi = least;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    // The limit that worked, not the peak found under it: the DP rounds sizes up, so a limit
    // equal to that peak may not find the same plan again.
    if (fit(costs, graph, cache, micro, mid, space)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return hi;
}

// What the explanation needs to say whether memory or speed chose `best`.
ChoiceFacts choice_facts(const core::CostModel& costs, const LayerGraph& graph, BatchCostsCache& cache, std::int64_t global_batch,
                         const Candidate& best, const Candidate& largest_fitting) {
  ChoiceFacts facts;
  facts.chosen = weighed(best, global_batch);
  facts.largest_fitting = weighed(largest_fitting, global_batch);
  Candidate whole;
  whole.choice = data_parallel_only(best.choice);
  whole.batches = even_split(global_batch, 1);
  whole.prediction = predict_step(costs, graph, whole.choice, whole.batches, &cache);
  facts.whole_batch = weighed(whole, global_batch);
  if (best.checkpointed_count() > 0) {
    core::StepChoice without = best.choice;
    without.checkpointed_blocks.clear();
    facts.peak_without_checkpointing = predict_step(costs, graph, without, best.batches, &cache).peak_bytes;
  }
  if (best.tempo_count() > 0) {
    facts.peak_without_tempo = predict_step(costs, graph, with_tempo_prefix(best.choice, {}, 0), best.batches, &cache).peak_bytes;
    facts.tempo_candidates = static_cast<int>(graph.tempo_candidates().size());
    const TempoOrder order = tempo_order(graph, cache, best.largest_micro_batch());
    for (std::size_t k = 0; k < order.free; ++k) facts.tempo_measured_faster += best.choice.is_tempo(order.layers[k]);
  }
  return facts;
}

// The plan document for the chosen candidate: its choices per layer and block, its prediction,
// and the warnings it needs.
core::Plan make_plan(const core::Trace& trace, const core::CostModel& costs, const LayerGraph& graph, const PlanRequest& request,
                     std::int64_t margin, const Candidate& best) {
  core::Plan plan;
  plan.trace_path = request.trace_path;
  plan.trace_sha256 = request.trace_sha256;
  plan.model = trace.model.name;
  plan.device = trace.device.kind;
  plan.precision = trace.precision;  // every figure of the trace holds for its precision alone
  plan.static_memory = core::static_memory(trace);
  plan.budget_bytes = request.budget_bytes;
  plan.margin_bytes = margin;
  plan.global_batch = request.global_batch;
  plan.choice = complete_choice(trace, graph, best.with_listed());
  for (const Technique* technique : techniques()) {
    const auto strategy = technique->strategy();
    if (strategy && technique->used_by(plan.choice)) plan.strategies.push_back(strategy_name(*strategy));
  }
  if (request.workers > 1) {
    // Every worker splits its share into as many micro-batches as worker 0 (fewer only where its
    // share is smaller than that count); the plan lists them all, worker by worker.
    const std::int64_t count = best.micro_batch_count();
    plan.choice.micro_batches.clear();
    for (const std::int64_t share : worker_shares(request.global_batch, request.workers)) {
      const auto sizes = split_batch(share, std::min(count, share));
      plan.choice.micro_batches.insert(plan.choice.micro_batches.end(), sizes.begin(), sizes.end());
      plan.choice.data_parallel->micro_batches_per_worker.push_back(static_cast<int>(sizes.size()));
    }
  }
  plan.warnings = plan_warnings(trace, sizes_of(best.batches), request.global_batch);
  if (const std::string warning = margin_warning(request.margin_fraction, worst_device_error(costs, graph));
      !warning.empty()) {
    plan.warnings.push_back(warning);
  }
  for (const Technique* technique : techniques()) technique->explain({trace, costs, graph, request, plan.choice}, plan.warnings);
  plan.predicted = weighed(best, request.global_batch).predicted;
  plan.peak_at = best.prediction.peak_at;
  // The search weighed worker 0's share; where the plan lists more (every worker's micro-batches), it
  // states that choice's prediction (the ring Inf-CL's time depends on the global batch, which the
  // share times the workers only approximates).
  if (plan.choice.micro_batches.size() != static_cast<std::size_t>(best.micro_batch_count())) {
    Candidate expanded = best;
    expanded.choice = plan.choice;
    expanded.prediction = predict_step(costs, graph, plan.choice);
    plan.predicted = weighed(expanded, request.global_batch).predicted;
    plan.peak_at = expanded.prediction.peak_at;
  }
  plan.predicted_parts = predicted_parts({trace, costs, graph, request, plan.choice});
  // Where micro-batches lie between the profiled sizes, how much of the peak is the bound's.
  if (!core::sizes_between_profiled(plan.choice.micro_batches, trace).empty()) {
    const core::CostModel on_the_line(trace, core::CostModel::Between::Line);
    const std::int64_t line_peak = predict_step(on_the_line, graph, plan.choice).peak_bytes;
    if (auto note = core::bound_between_sizes_note(plan, trace, line_peak)) plan.warnings.push_back(std::move(*note));
  }
  return plan;
}

// Throws InputError naming the request's first field out of range (plan_search.h).
void check_request(const core::Trace& trace, const PlanRequest& request) {
  if (request.global_batch <= 0) throw core::InputError("global_batch: expected a positive batch size");
  if (request.global_batch > kMaxGlobalBatch) {
    throw core::InputError("global_batch: at most " + std::to_string(kMaxGlobalBatch) + " samples");
  }
  if (request.budget_bytes <= 0) throw core::InputError("budget_bytes: expected a positive size");
  // What a plan file may hold (its reader refuses more), so every plan written reads back.
  if (request.budget_bytes > core::kMaxPlanBudget) {
    throw core::InputError("budget_bytes: at most " + core::format_bytes(core::kMaxPlanBudget) + ", got " +
                           core::format_bytes(request.budget_bytes));
  }
  if (!(request.margin_fraction >= 0.0 && request.margin_fraction <= 0.5)) {
    throw core::InputError("margin_fraction: expected a fraction between 0 and 0.5");
  }
  if (request.workers < 1 || request.workers > core::kMaxWorkers) {
    throw core::InputError("workers: expected from 1 to " + std::to_string(core::kMaxWorkers) + ", got " +
                           std::to_string(request.workers));
  }
  if (request.workers > request.global_batch) {
    throw core::InputError("workers: " + std::to_string(request.workers) + " workers need a global batch of at least " +
                           std::to_string(request.workers) + ", got " + std::to_string(request.global_batch));
  }
  if (request.workers > 1 && !request.link.known()) {
    throw core::InputError("link: data parallel needs the link's bandwidth and latency (a trace's measured link, or given)");
  }
  if (request.bucket_cap_bytes < 1) throw core::InputError("bucket_cap_bytes: expected a positive size");
  check_shard_stage(trace, request);
}

// The plan for the trace as if it had measured `request.optimizer` (optimizer_estimate.h).
PlanOutcome plan_with_estimated_optimizer(const core::Trace& trace, const PlanRequest& request) {
  PlanRequest as_measured = request;
  as_measured.optimizer.clear();
  PlanOutcome outcome = plan_step(with_estimated_optimizer(trace, request.optimizer), as_measured);
  if (outcome.plan) {
    outcome.plan->optimizer = core::parse_optimizer_spec(request.optimizer).text();
    outcome.plan->warnings.push_back(estimated_optimizer_warning(trace, request.optimizer));
  }
  return outcome;
}

std::int64_t margin_of(std::int64_t budget, double margin_fraction) {
  return static_cast<std::int64_t>(std::ceil(static_cast<double>(budget) * margin_fraction));
}

// What one plan_step shares among its phases.
struct PlanSearch {
  const core::Trace& trace;
  const PlanRequest& request;
  const core::CostModel& costs;
  const LayerGraph& graph;
  BatchCostsCache& cache;
  std::int64_t batch = 0;   // worker 0's share of the global batch, the largest: the search weighs it
  std::int64_t margin = 0;  // of the budget
  SearchSpace space;
};

// The splits of `weighed`: each one, or where the splits are many and bounds apply, weigh_bounded's.
Weighing weigh_space(const PlanSearch& search, const SearchSpace& weighed) {
  const PlanRequest& request = search.request;
  if (request.weigh_every_split || !bounded_search_applies(weighed) || split_count(search.batch) <= kSplitsWeighedEach) {
    return weigh_splits(search.costs, search.graph, search.cache, search.batch, weighed);
  }
  return weigh_bounded(search.costs, search.graph, search.cache, search.batch, weighed, [&](std::int64_t step_ns) {
    return Candidate{{}, {}, {0, step_ns, {}}}.samples_per_second(request.global_batch);
  });
}

// Where nothing fits: the least budget that would, and why none does.
void explain_no_fit(const PlanSearch& search, PlanOutcome& outcome) {
  const PlanRequest& request = search.request;
  const SearchSpace& space = search.space;
  const std::int64_t least = least_peak(search.costs, search.graph, search.cache, search.batch, space);
  // The least budget whose limit after the margin holds that peak.
  auto budget = static_cast<std::int64_t>(std::ceil(static_cast<double>(least) / (1.0 - request.margin_fraction)));
  while (budget - margin_of(budget, request.margin_fraction) < least) ++budget;
  outcome.smallest_budget = budget;
  std::string applied;
  // Those "all" left out because the trace lacks what they need are not named.
  for (const auto s : request.strategies) {
    if (applies_to(s, search.trace)) applied += (applied.empty() ? "" : ",") + strategy_name(s);
  }
  const core::CostModel& costs = search.costs;
  // With L2L the training state is not the device's floor: L2L keeps it on the host.
  outcome.reason = infeasible_reason(request.budget_bytes, space.limit,
                                     space.l2l ? 0
                                               : worker_static_bytes(costs, space.base) +
                                                     worker_optimizer_transient_bytes(costs, space.base),
                                     applied, least, outcome.smallest_budget,
                                     !space.l2l && costs.workspace_bytes() > 0);
  if (budget > core::kMaxPlanBudget) {
    // No plan can be made at it: name it in the reason, offer none.
    outcome.reason += "; that is more than the " + core::format_bytes(core::kMaxPlanBudget) + " a plan may hold";
    outcome.smallest_budget = 0;
  }
}

// The plan of the fastest split that fits (a higher peak ranks after on equal speeds; of splits
// whose speeds are a tie to the trace, the one preferred_on_a_tie), with what chose it and its
// runner-ups, fastest first. `fits`: fewest micro-batches first.
core::Plan plan_of_fastest(const PlanSearch& search, std::vector<Candidate>& fits) {
  const PlanRequest& request = search.request;
  // Splits were weighed fewest micro-batches first: the first that fits has the largest micro-batches.
  const Candidate largest_fitting = fits.front();
  std::stable_sort(fits.begin(), fits.end(), [&](const Candidate& a, const Candidate& b) {
    const double ra = a.samples_per_second(request.global_batch), rb = b.samples_per_second(request.global_batch);
    if (ra != rb) return ra > rb;
    return a.prediction.peak_bytes < b.prediction.peak_bytes;
  });
  const auto [taken, resolution] = taken_on_a_tie(search.costs.trace(), fits, request.global_batch);
  std::optional<WeighedStep> faster_on_a_tie;
  if (taken > 0) faster_on_a_tie = weighed(fits.front(), request.global_batch);
  const auto preferred = fits.begin() + static_cast<std::ptrdiff_t>(taken);
  std::rotate(fits.begin(), preferred, preferred + 1);
  const Candidate& best = fits.front();

  core::Plan plan = make_plan(search.trace, search.costs, search.graph, request, search.margin, best);
  ChoiceFacts facts = choice_facts(search.costs, search.graph, search.cache, search.batch, best, largest_fitting);
  // With several workers the facts weigh worker 0's share; a step moves the whole global batch.
  for (WeighedStep* step : {&facts.chosen, &facts.largest_fitting, &facts.whole_batch}) {
    step->predicted.samples_per_second *= static_cast<double>(request.global_batch) / static_cast<double>(search.batch);
  }
  facts.limit_bytes = search.space.limit;
  facts.margin_bytes = search.margin;
  facts.timing_resolution = resolution;
  facts.faster_on_a_tie = faster_on_a_tie;
  plan.binding_constraint = binding_constraint(facts);
  std::vector<WeighedStep> losers;
  for (std::size_t i = 1; i < fits.size() && i <= kRunnerUps; ++i) losers.push_back(weighed(fits[i], request.global_batch));
  plan.runner_ups = runner_ups(losers, facts.chosen, kRunnerUps, resolution);
  return plan;
}

}  // namespace

void check_shard_stage(const core::Trace& trace, const PlanRequest& request) {
  if (request.gather && (request.workers < 2 || (request.shard_stage && *request.shard_stage != 3))) {
    throw core::InputError("gather: only stage 3 gathers parameters, a unit at a time" +
                           std::string(request.workers < 2 ? ", over data-parallel workers (give the workers)"
                                                           : "; stage " + std::to_string(*request.shard_stage) + " keeps them whole"));
  }
  if (request.gather && !request.shard_stage) {
    // Named for stage 3 with the stage left to the search: stage 3 must be one it can weigh.
    PlanRequest at = request;
    at.shard_stage = 3;
    try {
      check_shard_stage(trace, at);
    } catch (const core::InputError& e) {
      const std::string message = e.what();
      throw core::InputError("gather: " + message.substr(message.find(": ") + 2));
    }
  }
  if (!request.shard_stage) return;
  const int stage = *request.shard_stage;
  const std::string named = "shard_stage: stage " + std::to_string(stage);
  if (stage < 0 || stage > core::kMaxShardStage) {
    throw core::InputError("shard_stage: expected a stage from 0 to " + std::to_string(core::kMaxShardStage) + ", got " +
                           std::to_string(stage));
  }
  if (request.workers < 2) {
    throw core::InputError(named + " shards the training state over data-parallel workers, and the request has one (give "
                           "the workers)");
  }
  if (stage == 0) return;
  if (request.strategies.contains(Strategy::L2L)) {
    throw core::InputError(named + " cannot combine with l2l: L2L keeps the training state on the host, one worker's");
  }
  if (trace.precision != core::Precision::Fp32) {
    throw core::InputError(named + " cannot combine with " + std::string(core::precision_name(trace.precision)) +
                           ": a sharded worker steps float32 parameters in place (profile and plan in fp32)");
  }
  if (trace.contrastive_loss) {
    throw core::InputError(named + " cannot combine with the ring loss of a contrastive model, whose gradient cache "
                           "runs replicated: plan it at stage 0");
  }
  // The buffers its gradients are reduced from are as large as the largest parameter tensor.
  if (stage >= 2 && trace.optimizer.largest_param_elements == 0) {
    throw core::InputError(named + " needs the trace's largest parameter tensor, which traces record since sharding: "
                           "profile the model again");
  }
}

namespace {

PlanOutcome plan_one_stage(const core::Trace& trace, const PlanRequest& request);

// The stages the search weighs where the request leaves the stage open: those the trace can run.
std::vector<int> runnable_shard_stages(const core::Trace& trace, const PlanRequest& request) {
  std::vector<int> stages{0};
  for (int stage = 1; stage <= core::kMaxShardStage; ++stage) {
    PlanRequest at = request;
    at.shard_stage = stage;
    if (stage != 3) at.gather.reset();
    try {
      check_shard_stage(trace, at);
      stages.push_back(stage);
    } catch (const core::InputError&) {
      // Not one this trace can run: the search leaves it out.
    }
  }
  return stages;
}

// Of outcomes weighed in turn: the fastest plan that fits (the first on a tie), else the outcome
// that needs the least budget.
class FastestThatFits {
 public:
  void weigh(PlanOutcome outcome) {
    if (outcome.plan) {
      if (!chosen_ || outcome.plan->predicted.samples_per_second > chosen_->plan->predicted.samples_per_second) {
        chosen_ = std::move(outcome);
      }
    } else if (least_.reason.empty() || (outcome.smallest_budget > 0 && outcome.smallest_budget < least_.smallest_budget)) {
      least_ = std::move(outcome);
    }
  }
  bool found() const { return chosen_.has_value(); }
  PlanOutcome take() { return chosen_ ? std::move(*chosen_) : std::move(least_); }

 private:
  std::optional<PlanOutcome> chosen_;
  PlanOutcome least_;
};

PlanOutcome::ShardStage shard_row(const core::CostModel& costs, const PlanRequest& at, const PlanOutcome& outcome) {
  core::StepChoice base;
  base.data_parallel = core::DataParallelChoice{at.workers, {}, at.link, at.bucket_cap_bytes, at.shard_stage.value_or(0)};
  PlanOutcome::ShardStage row{at.shard_stage.value_or(0), std::nullopt, worker_static_bytes(costs, base), outcome.smallest_budget,
                              at.shard_stage == 3 ? at.gather : std::nullopt};
  if (outcome.plan) row.predicted = outcome.plan->predicted;
  return row;
}

// Where nothing fits: which row the least budget is for, and what the others need.
void name_the_least(const std::vector<PlanOutcome::ShardStage>& rows, PlanOutcome& out) {
  if (rows.size() < 2) return;
  std::string others;
  bool named = false;
  for (const auto& row : rows) {
    if (!named && row.smallest_budget == out.smallest_budget) {
      out.reason += " (at " + shard_row_name(row) + ", the stage that needs the least";
      named = true;
    } else if (row.smallest_budget > 0) {
      others += "; " + shard_row_name(row) + " at least " + core::format_bytes_at_least(row.smallest_budget);
    }
  }
  out.reason += others + ")";
}

// Stage 3 planned gathering per block and per layer, unless the request names one: the faster
// plan that fits (per block on a tie), a row each (which the caller names where none fits).
PlanOutcome plan_stage_three(const core::Trace& trace, const PlanRequest& request) {
  if (request.gather) return plan_one_stage(trace, request);
  const core::CostModel costs(trace);
  std::vector<PlanOutcome::ShardStage> rows;
  FastestThatFits best;
  for (const core::GatherUnit unit : {core::GatherUnit::Block, core::GatherUnit::Layer}) {
    PlanRequest at = request;
    at.gather = unit;
    PlanOutcome outcome = plan_one_stage(trace, at);
    rows.push_back(shard_row(costs, at, outcome));
    best.weigh(std::move(outcome));
  }
  PlanOutcome out = best.take();
  out.shard_stages = std::move(rows);
  return out;
}

// Each runnable stage planned; the fastest plan that fits (the lower stage on a tie), else the
// outcome of the stage that needs the least.
PlanOutcome plan_every_stage(const core::Trace& trace, const PlanRequest& request) {
  std::vector<PlanOutcome::ShardStage> rows;
  FastestThatFits best;
  const core::CostModel costs(trace);
  for (const int stage : runnable_shard_stages(trace, request)) {
    PlanRequest at = request;
    at.shard_stage = stage;
    if (stage != 3) at.gather.reset();  // what stage 3 gathers, where the request names it
    PlanOutcome outcome = stage == 3 ? plan_stage_three(trace, at) : plan_one_stage(trace, at);
    if (outcome.shard_stages.empty()) {
      rows.push_back(shard_row(costs, at, outcome));
    } else {
      rows.insert(rows.end(), outcome.shard_stages.begin(), outcome.shard_stages.end());
      outcome.shard_stages.clear();
    }
    best.weigh(std::move(outcome));
  }
  const bool found = best.found();
  PlanOutcome out = best.take();
  if (!found) name_the_least(rows, out);
  out.shard_stages = std::move(rows);
  return out;
}

}  // namespace

PlanOutcome plan_step(const core::Trace& trace, const PlanRequest& request) {
  if (request.workers > 1 && !request.shard_stage) {
    check_request(trace, request);
    return plan_every_stage(trace, request);
  }
  if (request.shard_stage == 3) {
    check_request(trace, request);
    PlanOutcome out = plan_stage_three(trace, request);
    if (!out.plan) name_the_least(out.shard_stages, out);
    return out;
  }
  return plan_one_stage(trace, request);
}

std::string shard_row_name(const PlanOutcome::ShardStage& row) {
  return core::shard_stage_name(row.stage) + (row.gather ? ", per " + std::string(core::gather_unit_name(*row.gather)) : "");
}

namespace {

PlanOutcome plan_one_stage(const core::Trace& trace, const PlanRequest& request) {
  if (!request.optimizer.empty() &&
      core::parse_optimizer_spec(request.optimizer, "--optimizer") != core::parse_optimizer_spec(trace.optimizer.name)) {
    return plan_with_estimated_optimizer(trace, request);
  }
  check_request(trace, request);
  const core::CostModel costs(trace);
  const LayerGraph graph(trace);
  BatchCostsCache cache(costs);
  PlanSearch search{trace, request, costs, graph, cache, 0, 0, SearchSpace{}};
  // With several workers the search weighs worker 0's share, the largest.
  search.batch = worker_shares(request.global_batch, request.workers).front();
  search.margin = margin_of(request.budget_bytes, request.margin_fraction);
  SearchSpace& space = search.space;
  space.limit = request.budget_bytes - search.margin;
  for (const Technique* technique : techniques()) technique->open(space, trace, graph, request);

  PlanOutcome outcome;
  // L2L only where no plan without it fits: it moves the training state to the host, which the
  // budget does not count, and runs every block's forward twice ("all" holds it on these terms).
  SearchSpace on_the_device = space;
  on_the_device.l2l = false;
  Weighing weighing = weigh_space(search, on_the_device);
  if (weighing.fits.empty() && space.l2l) weighing = weigh_space(search, space);
  outcome.splits = std::move(weighing.splits);
  // Each split's step moves the whole global batch through every worker at once.
  for (auto& split : outcome.splits) {
    split.predicted.samples_per_second *= static_cast<double>(request.global_batch) / static_cast<double>(search.batch);
  }
  if (weighing.fits.empty()) {
    explain_no_fit(search, outcome);
    return outcome;
  }
  outcome.plan = plan_of_fastest(search, weighing.fits);
  return outcome;
}

}  // namespace

}  // namespace headroom::planner
