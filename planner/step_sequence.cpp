#include "planner/step_sequence.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "core/errors.h"
#include "core/saturating.h"
#include "planner/data_parallel_model.h"
#include "planner/infcl_model.h"
#include "planner/plan_search.h"
#include "planner/ring_infcl_model.h"
#include "planner/technique.h"

namespace headroom::planner {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::Forward: return "forward";
    case OpKind::ForwardNoGrad: return "forward (checkpointed, no grad)";
    case OpKind::Recompute: return "recompute";
    case OpKind::Backward: return "backward";
    case OpKind::LoadInput: return "input";
    case OpKind::ReleaseLeftovers: return "micro-batch end";
    case OpKind::ReleaseInput: return "input released";
    case OpKind::Optimizer: return "optimizer";
    case OpKind::GradientCache: return "gradient cache";
    case OpKind::CollectiveWait: return "collective wait";
  }
  return "?";
}

namespace {

// A layer's time scaled to the step, held at the trace's limit for one duration (the scale of a
// trace whose layers measured next to nothing can be huge).
std::int64_t scaled_within_trace_limit(std::int64_t ns, double scale) {
  return std::llround(std::min(static_cast<double>(ns) * scale, static_cast<double>(core::kMaxTraceNs)));
}

// For each layer, the block span it belongs to if that block is checkpointed, else nullptr. Block
// ids the graph lacks or cannot checkpoint are left out (check_choice refuses them).
std::vector<const BlockSpan*> checkpointed_span_of(const LayerGraph& graph, const std::vector<int>& checkpointed_blocks) {
  std::vector<const BlockSpan*> span_of(graph.size(), nullptr);
  for (const int id : checkpointed_blocks) {
    const BlockSpan* span = graph.block_with_id(id);
    if (span == nullptr || !span->checkpointable) continue;
    for (int i = span->first; i <= span->last; ++i) span_of[static_cast<std::size_t>(i)] = span;
  }
  return span_of;
}

}  // namespace

BatchCosts batch_costs(const core::CostModel& costs, std::int64_t batch) {
  BatchCosts out;
  out.batch = batch;
  out.scale = costs.layer_time_scale(batch);
  out.checkpoint_state_bytes = costs.checkpoint_state_bytes();
  out.buffer_copy_bytes = costs.trace().model_extra_bytes;
  out.layers.reserve(costs.layer_count());
  out.tempo.reserve(costs.layer_count());
  for (std::size_t i = 0; i < costs.layer_count(); ++i) {
    out.layers.push_back(costs.layer(i, batch));
    // Only layers with a Tempo profile are evaluated twice.
    out.tempo.push_back(costs.has_tempo_variant(i) ? costs.tempo_layer(i, batch) : out.layers.back());
  }
  if (costs.has_checkpointed_layers()) {
    for (std::size_t i = 0; i < costs.layer_count(); ++i) out.checkpointed.push_back(costs.checkpointed_layer(i, batch));
  }
  return out;
}

const BatchCosts& BatchCostsCache::at(std::int64_t batch) {
  for (const auto& known : recent_) {
    if (known.batch == batch) return known;
  }
  constexpr std::size_t kKept = 4;
  if (recent_.size() == kKept) recent_.erase(recent_.begin());
  recent_.push_back(batch_costs(costs_, batch));
  return recent_.back();
}

std::int64_t tempo_saved_bytes(const BatchCosts& costs, const LayerGraph& graph, int layer) {
  const auto i = static_cast<std::size_t>(layer);
  std::int64_t saved = costs.layers[i].fwd_retained_bytes - costs.tempo[i].fwd_retained_bytes;
  for (const auto& released : graph.released_inputs(layer)) {
    saved += costs.layers[static_cast<std::size_t>(released.producer)].output_bytes;
  }
  const HeldOutput& held = graph.held_output(layer);
  if (held.released_by >= 0 && !held.in_backward) saved -= costs.layers[i].output_bytes;
  return saved;
}

namespace {

using core::LayerVariant;

// Whether the trace lets `layer` run `variant` on its own.
bool variant_applies(const LayerGraph& graph, int layer, LayerVariant variant) {
  switch (variant) {
    case LayerVariant::Standard: return true;
    case LayerVariant::Tempo: return graph.can_be_tempo(layer);
  }
  return false;
}

// Each layer's variant as it runs: the chosen one where it applies, else the standard one. A Tempo
// layer inside a checkpointed block runs as one in the block's recompute too (the executor runs the
// plan's variants wherever they are).
std::vector<LayerVariant> running_variant_of(const LayerGraph& graph, const core::StepChoice& choice) {
  std::vector<LayerVariant> out(graph.size(), LayerVariant::Standard);
  for (std::size_t i = 0; i < out.size() && i < choice.layers.size(); ++i) {
    const LayerVariant v = choice.layers[i].variant;
    if (variant_applies(graph, static_cast<int>(i), v)) out[i] = v;
  }
  return out;
}

// Layer i's costs when it runs `variant`, and what that moves to other layers. A Tempo layer runs at
// its Tempo cost, and an input it no longer keeps is freed by its last reader's forward (measured
// there as a smaller net change). `span` is i's block where that block is checkpointed.
void apply_variant(const BatchCosts& costs, const LayerGraph& graph, std::size_t i, LayerVariant variant,
                   const BlockSpan* span, std::vector<core::LayerCost>& adjusted) {
  switch (variant) {
    case LayerVariant::Standard: return;
    case LayerVariant::Tempo: {
      adjusted[i] = costs.tempo[i];
      for (const auto& released : graph.released_inputs(static_cast<int>(i))) {
        adjusted[static_cast<std::size_t>(released.freed_by)].fwd_retained_bytes -=
            costs.layers[static_cast<std::size_t>(released.producer)].output_bytes;
      }
      const HeldOutput& held = graph.held_output(static_cast<int>(i));
      if (held.released_by >= 0 && span != nullptr && static_cast<int>(i) == span->last) {
        // A checkpointed block's output: the later layers read the one its forward without grad
        // made, which goes as with the standard layer; the output its recompute makes and the Tempo
        // layer keeps is held by the checkpoint until the block's backward ends, not freed by the
        // Tempo layer's backward.
        adjusted[i].bwd_retained_bytes += costs.layers[i].output_bytes;
      } else if (held.released_by >= 0) {
        auto& releaser = adjusted[static_cast<std::size_t>(held.released_by)];
        (held.in_backward ? releaser.bwd_retained_bytes : releaser.fwd_retained_bytes) += costs.layers[i].output_bytes;
      }
      return;
    }
  }
}

}  // namespace

core::StepChoice effective_variants(const LayerGraph& graph, core::StepChoice choice) {
  const auto span_of = checkpointed_span_of(graph, choice.checkpointed_blocks);
  const auto running = running_variant_of(graph, choice);
  for (std::size_t i = 0; i < choice.layers.size(); ++i) {
    if (i < running.size()) choice.layers[i].variant = span_of[i] == nullptr ? running[i] : LayerVariant::Standard;
  }
  return choice;
}

core::StepChoice complete_choice(const core::Trace& trace, const LayerGraph& graph, core::StepChoice choice) {
  const auto span_of = checkpointed_span_of(graph, choice.checkpointed_blocks);
  choice.checkpointed_blocks.clear();
  for (const auto& span : graph.blocks()) {
    if (span_of[static_cast<std::size_t>(span.first)] == &span) choice.checkpointed_blocks.push_back(span.block);
  }
  std::vector<core::LayerStep> layers;
  layers.reserve(trace.layers.size());
  for (const auto& layer : trace.layers) {
    const auto i = static_cast<std::size_t>(layer.id);
    layers.push_back({layer.id, layer.name, span_of[i] != nullptr, choice.variant(layer.id)});
  }
  choice.layers = std::move(layers);
  return choice;
}


namespace {

// The ops of layers [first, last] of one micro-batch: each layer's forward (without grad inside a
// checkpointed block), then in reverse each layer's backward, a checkpointed block's recompute
// before its last layer's. The members are the layers' costs as their variants make them.
class LayerOpsBuilder {
 public:
  LayerOpsBuilder(const BatchCosts& costs, const LayerGraph& graph, const std::vector<const BlockSpan*>& span_of,
                  const std::vector<LayerVariant>& variant, int first, int last)
      : costs_(costs), graph_(graph), span_of_(span_of), variant_(variant), first_(first), last_(last) {
    const std::size_t n = costs.layers.size();
    // With only standard layers the costs are used as they are, not copied.
    const auto other = [](LayerVariant v) { return v != LayerVariant::Standard; };
    if (std::any_of(variant.begin(), variant.end(), other)) adjusted_ = costs.layers;
    for (std::size_t i = 0; i < n && !adjusted_.empty(); ++i) apply_variant(costs, graph, i, variant[i], span_of[i], adjusted_);
    move_kept_outputs();
  }

  void append_to(std::vector<Op>& ops) const {
    ops.reserve(ops.size() + 3 * static_cast<std::size_t>(last_ - first_ + 1) + 3);
    for (std::size_t i = static_cast<std::size_t>(first_); i <= static_cast<std::size_t>(last_); ++i) ops.push_back(forward(i));
    for (std::size_t r = static_cast<std::size_t>(last_) + 1; r-- > static_cast<std::size_t>(first_);) {
      const BlockSpan* span = span_of_[r];
      // Entering a checkpointed block from above: re-run its forward with grad first.
      if (span != nullptr && static_cast<int>(r) == span->last) append_recompute(*span, ops);
      ops.push_back(backward(r));
    }
  }

 private:
  const std::vector<core::LayerCost>& cost() const { return adjusted_.empty() ? costs_.layers : adjusted_; }
  static std::int64_t moved(const std::vector<std::int64_t>& by_layer, std::size_t i) {
    return by_layer.empty() ? std::int64_t{0} : by_layer[i];
  }

  // A block input nobody keeps for backward (no reader saves it, or the Tempo layers that would have
  // released it) is freed by its last reader in a normal forward; a checkpoint holds it until the
  // block's backward is done instead.
  std::int64_t unsaved_input_bytes(const BlockSpan& span) const {
    if (span.input < 0) return 0;
    const int reader = graph_.last_reader(span.input);
    if (reader < span.first || reader > span.last) return 0;
    bool released = !graph_.output_saved(span.input);
    for (int i = span.first; i <= span.last && !released; ++i) {
      if (variant_[static_cast<std::size_t>(i)] == LayerVariant::Standard) continue;
      for (const auto& r : graph_.released_inputs(i)) released = released || r.producer == span.input;
    }
    return released ? cost()[static_cast<std::size_t>(span.input)].output_bytes : 0;
  }

  // A block of one layer the trace measured as a checkpointed block of its own: its recompute's
  // and backward's peaks as measured, in place of the rules for composite layers.
  const core::CheckpointedSample* measured_alone(const BlockSpan& span) const {
    if (span.first != span.last || costs_.checkpointed.empty()) return nullptr;
    const auto& m = costs_.checkpointed[static_cast<std::size_t>(span.first)];
    return m ? &*m : nullptr;
  }

  void move_kept_outputs();
  Op forward(std::size_t i) const;
  void append_recompute(const BlockSpan& span, std::vector<Op>& ops) const;
  Op backward(std::size_t r) const;

  const BatchCosts& costs_;
  const LayerGraph& graph_;
  const std::vector<const BlockSpan*>& span_of_;
  const std::vector<LayerVariant>& variant_;
  const int first_, last_;
  std::vector<core::LayerCost> adjusted_;  // the costs where some layer runs another variant
  std::vector<std::int64_t> fwd_moved_, bwd_moved_;  // retained changes by layer, where any
};

// A measured layer that keeps its own output (a module ending in ReLU), checkpointed alone: its
// forward without grad keeps nothing, so its output goes when its readers let go of it, not in
// its own backward as in the standard step the trace measured. Only where those readers run
// here and are not checkpointed themselves (else it is counted to the block's end: a bound).
void LayerOpsBuilder::move_kept_outputs() {
  const std::size_t n = costs_.layers.size();
  for (int i = first_; i <= last_; ++i) {
    const BlockSpan* span = span_of_[static_cast<std::size_t>(i)];
    if (span == nullptr || measured_alone(*span) == nullptr || !graph_.keeps_own_output(i)) continue;
    const HeldOutput release = graph_.released_by_readers(i);
    if (release.released_by < 0 || release.released_by > last_ || span_of_[static_cast<std::size_t>(release.released_by)] != nullptr) {
      continue;
    }
    if (fwd_moved_.empty()) {
      fwd_moved_.assign(n, 0);
      bwd_moved_.assign(n, 0);
    }
    const std::int64_t bytes = cost()[static_cast<std::size_t>(i)].output_bytes;
    (release.in_backward ? bwd_moved_ : fwd_moved_)[static_cast<std::size_t>(release.released_by)] -= bytes;
    bwd_moved_[static_cast<std::size_t>(i)] += bytes;
  }
}

Op LayerOpsBuilder::forward(std::size_t i) const {
  const auto& c = cost()[i];
  const BlockSpan* span = span_of_[i];
  if (span == nullptr) {
    return {OpKind::Forward, static_cast<int>(i), scaled_within_trace_limit(c.fwd_ns, costs_.scale), c.fwd_transient_bytes,
            c.fwd_retained_bytes + moved(fwd_moved_, i)};
  }
  // Without grad nothing is saved: a layer holds its transient plus the block outputs still to
  // be read; at the end only the block's output remains.
  std::int64_t live_inside = 0;
  for (int j = span->first; j < static_cast<int>(i); ++j) {
    if (graph_.last_reader(j) >= static_cast<int>(i)) live_inside += cost()[static_cast<std::size_t>(j)].output_bytes;
  }
  const bool block_output = static_cast<int>(i) == span->last;
  // The block saves the RNG state as it starts and holds it until its backward is done.
  const std::int64_t state = static_cast<int>(i) == span->first ? costs_.checkpoint_state_bytes : 0;
  return {OpKind::ForwardNoGrad, static_cast<int>(i), scaled_within_trace_limit(c.fwd_ns, costs_.scale),
          state + c.fwd_transient_bytes + live_inside, state + (block_output ? c.output_bytes : 0)};
}

// A checkpointed block's forward again, with grad. The recomputed output is held until the
// block's backward ends, where it is released.
void LayerOpsBuilder::append_recompute(const BlockSpan& span, std::vector<Op>& ops) const {
  const auto* measured = measured_alone(span);
  for (int i = span.first; i <= span.last; ++i) {
    const auto& ci = cost()[static_cast<std::size_t>(i)];
    std::int64_t retained = ci.fwd_retained_bytes;
    std::int64_t transient = ci.fwd_transient_bytes;
    // The block input's free by its last reader does not happen: the checkpoint holds it.
    if (span.input >= 0 && graph_.last_reader(span.input) == i) retained += unsaved_input_bytes(span);
    if (measured != nullptr) {
      retained += measured->recompute_extra_bytes;
      transient = measured->recompute_transient_bytes;
    } else if (graph_.recomputes_on_buffer_copies(i)) {
      // The copies of a module's buffers it recomputes on, until its backward: without the
      // checkpointed pass the trace has the model's buffers only as a whole (model_extra_bytes),
      // which bounds one module's.
      retained += costs_.buffer_copy_bytes;
    }
    // The current RNG state is kept aside while the block runs again with the saved one.
    ops.push_back({OpKind::Recompute, i, scaled_within_trace_limit(ci.fwd_ns, costs_.scale), costs_.checkpoint_state_bytes + transient, retained});
  }
}

Op LayerOpsBuilder::backward(std::size_t r) const {
  const auto& c = cost()[r];
  const BlockSpan* span = span_of_[r];
  std::int64_t retained = c.bwd_retained_bytes;
  std::int64_t transient = c.bwd_transient_bytes;
  if (span != nullptr) {
    const int layer = static_cast<int>(r);
    const auto* measured = measured_alone(*span);
    // Without a measurement, a composite layer may have let the held gradient and recomputed
    // output go before its own peak in a standard step: counted on top, as a bound.
    const bool composite = measured == nullptr && graph_.composite(layer);
    // Both the block's recomputed output and the gradient at it (which the checkpoint's backward
    // receives and holds until it returns) are this size.
    const std::int64_t block_output = cost()[static_cast<std::size_t>(span->last)].output_bytes;
    if (measured != nullptr) {
      retained -= measured->recompute_extra_bytes;
      // Measured with the gradient and the recomputed output held, as here.
      transient = measured->bwd_transient_bytes;
    } else if (graph_.recomputes_on_buffer_copies(layer)) {
      retained -= costs_.buffer_copy_bytes;
    }
    // A standard step lets the gradient go here (layer_graph.h: output_gradient_released_by); a
    // composite layer may have let it go before its own peak, which it now holds too.
    if (layer == span->output_gradient_released_by) {
      retained += block_output;
      if (composite) transient += block_output;
    }
    // Likewise the recomputed output, held to the end where a composite last layer's own nodes
    // may have let it go partway.
    if (layer == span->last && composite) transient += block_output;
    if (layer == span->first) {
      // The block's backward is done: the recomputed output and its gradient, the held input and
      // the saved RNG state go.
      retained -= 2 * block_output + unsaved_input_bytes(*span) + costs_.checkpoint_state_bytes;
    }
  }
  return {OpKind::Backward, static_cast<int>(r), scaled_within_trace_limit(c.bwd_ns, costs_.scale), transient, retained + moved(bwd_moved_, r)};
}

// Appends the ops of layers [first, last] to `ops`.
void append_layer_ops(const BatchCosts& costs, const LayerGraph& graph, const std::vector<const BlockSpan*>& span_of,
                      const std::vector<LayerVariant>& variant, int first, int last, std::vector<Op>& ops) {
  LayerOpsBuilder(costs, graph, span_of, variant, first, last).append_to(ops);
}

}  // namespace

std::vector<Op> micro_batch_ops(const BatchCosts& costs, const LayerGraph& graph, const core::StepChoice& choice,
                                int first, int last) {
  const auto span_of = checkpointed_span_of(graph, choice.checkpointed_blocks);
  std::vector<Op> ops;
  append_layer_ops(costs, graph, span_of, running_variant_of(graph, choice), first, last, ops);
  add_parameter_gathers(ops, graph, parameter_gathers(graph, choice));
  return ops;
}

Walk walk(const std::vector<Op>& ops) {
  Walk w;
  std::int64_t level = 0;
  const auto consider = [&w](std::int64_t bytes, int op) {
    if (w.peak_op < 0 || bytes > w.peak_bytes) {
      w.peak_bytes = bytes;
      w.peak_op = op;
    }
  };
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const Op& op = ops[k];
    consider(level + op.transient_bytes, static_cast<int>(k));
    level += op.retained_bytes;
    consider(level, static_cast<int>(k));
    w.duration_ns += op.duration_ns;
    if (op.kind == OpKind::Recompute) w.recompute_ns += op.duration_ns;
  }
  return w;
}

namespace {

// Where the loss layer's time comes from: its own model's (the gradient cache's surrogate); the
// longer of that and the step's measurement of the layer (the whole loss past the step's profiled
// sizes, or tiled); the step's measurement alone (the standard loss within them, where the loss
// timed apart is scaled from another size and runs longer than the step's: docs/design.md, "Inf-CL").
enum class LossTime { Modelled, LongerOfModelledAndStep, AsTheStepMeasured };

// The loss layer's forward and backward ops at `cost` (its own model's, not interpolated), timed
// as `time` says.
void use_loss_cost(std::vector<Op>& ops, int loss_layer, const core::LayerCost& cost, LossTime time) {
  for (Op& op : ops) {
    if (op.layer != loss_layer || (op.kind != OpKind::Forward && op.kind != OpKind::Backward)) continue;
    const bool fwd = op.kind == OpKind::Forward;
    const std::int64_t ns = fwd ? cost.fwd_ns : cost.bwd_ns;
    const std::int64_t duration = time == LossTime::Modelled                  ? ns
                                  : time == LossTime::LongerOfModelledAndStep ? std::max(op.duration_ns, ns)
                                                                              : op.duration_ns;
    op = {op.kind, op.layer, duration, fwd ? cost.fwd_transient_bytes : cost.bwd_transient_bytes,
          fwd ? cost.fwd_retained_bytes : cost.bwd_retained_bytes};
  }
}

// What the loss layer holds after its backward is the step's own measurement of it: measured alone,
// the loss (whole or the gradient cache's surrogate) also holds the gradients of both embeddings,
// which in the step the towers' backward counts (counted twice, a clip step comes out over:
// docs/design.md, "Inf-CL").
core::LayerCost held_after_backward_as_in_step(const core::LayerCost& in_step, core::LayerCost alone) {
  alone.bwd_retained_bytes = in_step.fwd_retained_bytes + in_step.bwd_retained_bytes - alone.fwd_retained_bytes;
  return alone;
}

// The loss over a whole batch: the loss measured alone, fitted, and the loss layer as the step
// measured it at the profiled sizes (where it also holds a few hundred bytes the loss alone does
// not, and at large batches runs slower than the loss alone scaled by B^2), whichever holds more
// in each field (its time: LossTime).
core::LayerCost whole_loss_cost(const core::LayerCost& in_step, core::LayerCost alone) {
  alone.fwd_transient_bytes = std::max(alone.fwd_transient_bytes, in_step.fwd_transient_bytes);
  alone.fwd_retained_bytes = std::max(alone.fwd_retained_bytes, in_step.fwd_retained_bytes);
  alone.bwd_transient_bytes = std::max(alone.bwd_transient_bytes, in_step.bwd_transient_bytes);
  return held_after_backward_as_in_step(in_step, alone);
}

// A segment per run of one size, the last micro-batch a segment of its own that keeps its input
// (it stays until the optimizer has stepped).
template <typename OpsFor>
void append_micro_batch_segments(const std::vector<MicroBatchRun>& runs, OpsFor& ops_for, StepSequence& seq) {
  std::int64_t first = 0;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const bool last = k + 1 == runs.size();
    const std::int64_t repeat = runs[k].count - (last ? 1 : 0);
    if (repeat > 0) seq.segments.push_back({ops_for(runs[k].size), runs[k].size, first, repeat, false});
    first += repeat;
    if (last) seq.segments.push_back({ops_for(runs[k].size), runs[k].size, first, 1, true});
  }
}

// A contrastive model's micro-batched step (infcl_model.h): the cache, every micro-batch's
// embeddings without grad, the loss over the whole batch, every micro-batch again with grad from
// the cached gradients (each its input, its ops, what they leave and its input going, so a run of
// one size repeats), the cache going, the optimizer.
template <typename OpsFor>
void append_grad_cache_step(const core::CostModel& costs, const LayerGraph& graph, const ContrastiveLossModel& model,
                            const core::StepChoice& choice, const StepBatches& batches, BatchCostsCache* cache,
                            OpsFor& ops_for, StepSequence& seq) {
  // A data-parallel worker (worker 0, the largest share) caches its own rows; its loss is the ring's.
  const core::DataParallelChoice* ring = choice.ring_loss && choice.data_parallel ? &*choice.data_parallel : nullptr;
  std::int64_t rows = 0, count = 0;
  for (const auto& run : batches.runs) rows += run.size * run.count, count += run.count;
  // The plan lists every worker's micro-batches; the search weighs worker 0's alone, where the
  // global batch is about its share times the workers (the plan's prediction is the exact one).
  const std::int64_t global =
      ring != nullptr && ring->micro_batches_per_worker.empty() ? rows * ring->workers : batches.samples;
  const std::int64_t held = gradient_cache_bytes(model, rows, static_cast<std::size_t>(count), costs.checkpoint_state_bytes());
  seq.ops.push_back({{OpKind::GradientCache, -1, 0, 0, held}});
  seq.segments.push_back({seq.ops.size() - 1, 0, 0, 1, false});
  const auto runs = [&](auto&& segment_of) {
    std::int64_t first = 0;
    for (const auto& run : batches.runs) {
      seq.segments.push_back({segment_of(run.size), run.size, first, run.count, false});
      first += run.count;
    }
  };
  std::vector<std::pair<std::int64_t, std::size_t>> embedding_made;
  runs([&](std::int64_t b) {
    for (const auto& [size, index] : embedding_made) {
      if (size == b) return index;
    }
    std::vector<Op> ops{{OpKind::LoadInput, -1, 0, 0, costs.input_bytes(b)}};
    const auto embed = cache != nullptr ? embedding_ops(cache->at(b), graph, model.layer())
                                        : embedding_ops(batch_costs(costs, b), graph, model.layer());
    ops.insert(ops.end(), embed.begin(), embed.end());
    ops.push_back({OpKind::ReleaseInput, -1, 0, 0, -costs.input_bytes(b)});
    seq.ops.push_back(std::move(ops));
    embedding_made.emplace_back(b, seq.ops.size() - 1);
    return seq.ops.size() - 1;
  });
  seq.ops.push_back(ring != nullptr ? ring_loss_ops(model, {rows, rows, global, ring->workers, ring->link}, choice.loss_tiles)
                         : cached_loss_ops(model, global, choice.loss_tiles));
  seq.segments.push_back({seq.ops.size() - 1, global, 0, 1, false});
  if (!ring) {
    runs([&](std::int64_t b) { return ops_for(b); });
    seq.ops.push_back({{OpKind::GradientCache, -1, 0, 0, -held},
                       {OpKind::Optimizer, -1, worker_optimizer_ns(costs, choice), worker_optimizer_transient_bytes(costs, choice), 0}});
    seq.segments.push_back({seq.ops.size() - 1, 0, count, 1, false});
    return;
  }
  // Data parallel: the last micro-batch is a segment of its own whose backward sends the gradients'
  // buckets (its input goes with the optimizer's segment, as in the plain step).
  append_micro_batch_segments(batches.runs, ops_for, seq);
  seq.ops.push_back({{OpKind::ReleaseInput, -1, 0, 0, -costs.input_bytes(batches.runs.back().size)},
                     {OpKind::GradientCache, -1, 0, 0, -held},
                     {OpKind::Optimizer, -1, worker_optimizer_ns(costs, choice), worker_optimizer_transient_bytes(costs, choice), 0}});
  seq.segments.push_back({seq.ops.size() - 1, 0, count, 1, false});
}

}  // namespace

std::vector<MicroBatchRun> micro_batch_runs(const std::vector<std::int64_t>& sizes) {
  std::vector<MicroBatchRun> runs;
  for (const auto b : sizes) {
    if (!runs.empty() && runs.back().size == b) {
      ++runs.back().count;
    } else {
      runs.push_back({b, 1});
    }
  }
  return runs;
}

StepBatches step_batches(const core::StepChoice& choice) {
  // Data parallel predicts worker 0, which carries the largest share. A plan's list can be long:
  // it is read once, not copied.
  if (choice.data_parallel) return {micro_batch_runs(choice.worker_micro_batches(0)), choice.samples()};
  StepBatches batches{micro_batch_runs(choice.micro_batches), 0};
  for (const auto& run : batches.runs) batches.samples += run.size * run.count;
  return batches;
}

StepSequence step_sequence(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice,
                           BatchCostsCache* cache) {
  return step_sequence(costs, graph, choice, step_batches(choice), cache);
}

StepSequence step_sequence(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice,
                           const StepBatches& batches, BatchCostsCache* cache) {
  if (cache != nullptr && &cache->costs() != &costs) cache = nullptr;
  StepSequence seq;
  // A data-parallel worker also keeps its communication buckets.
  seq.static_bytes = worker_static_bytes(costs, choice);
  const auto span_of = checkpointed_span_of(graph, choice.checkpointed_blocks);
  const auto variant = running_variant_of(graph, choice);
  std::int64_t count = 0;
  for (const auto& run : batches.runs) count += run.count;
  const int last_layer = static_cast<int>(costs.layer_count()) - 1;
  // A micro-batch: its input arrives, its layers run, what their measured changes leave over goes
  // (so every micro-batch starts from the same level), and its input goes, except the last one's,
  // which stays until the optimizer has stepped. Micro-batches of one size run the same ops: they
  // are made once per distinct size (a split has at most two).
  // Most steps have one or two sizes.
  std::vector<std::pair<std::int64_t, std::size_t>> made;  // size, index into seq.ops
  made.reserve(2);
  seq.ops.reserve(3);
  seq.segments.reserve(4);
  // A contrastive model's loss layer costs what its own model says: the whole loss in a plain step,
  // the gradient cache's surrogate in a micro-batched one (infcl_model.h).
  const auto loss_model = contrastive_loss_model(costs.trace());
  const bool grad_cache = loss_model && core::caches_contrastive_gradients(count, choice.workers());
  const std::vector<std::int64_t> reduce_ns = gradient_reduce_ns(costs, graph, choice);
  const std::vector<std::int64_t> reduce_copy_ns = gradient_reduce_copy_ns(costs, graph, choice);
  const ParameterUnits gathers = parameter_gathers(graph, choice);
  const auto ops_for = [&](std::int64_t b) {
    for (const auto& [size, index] : made) {
      if (size == b) return index;
    }
    std::vector<Op> ops;
    ops.reserve(3 * costs.layer_count() + 3);
    ops.push_back({OpKind::LoadInput, -1, 0, 0, costs.input_bytes(b)});
    std::optional<BatchCosts> made_here;
    if (cache == nullptr) made_here = batch_costs(costs, b);
    const BatchCosts& batch_cost = cache != nullptr ? cache->at(b) : *made_here;
    append_layer_ops(batch_cost, graph, span_of, variant, 0, last_layer, ops);
    if (loss_model) {
      const int loss = loss_model->layer();
      const core::LayerCost& in_step = batch_cost.layers[static_cast<std::size_t>(loss)];
      if (grad_cache) {
        use_loss_cost(ops, loss, held_after_backward_as_in_step(in_step, loss_model->surrogate(b)), LossTime::Modelled);
      } else {
        const auto& profiled = costs.trace().batch_sizes;
        const bool step_timed_it = !choice.loss_tiles && b >= profiled.front() && b <= profiled.back();
        use_loss_cost(ops, loss, whole_loss_cost(in_step, loss_model->loss(b, choice.loss_tiles)),
                      step_timed_it ? LossTime::AsTheStepMeasured : LossTime::LongerOfModelledAndStep);
      }
    }
    add_parameter_gathers(ops, graph, gathers);
    if (add_gradient_reduces(ops, reduce_ns, reduce_copy_ns)) {
      ops.push_back({OpKind::CollectiveWait, -1, collectives_past_compute_ns(ops, choice.data_parallel->link.beside_compute), 0, 0});
    }
    std::int64_t net = 0;
    for (std::size_t k = 1; k < ops.size(); ++k) net += ops[k].retained_bytes;
    ops.push_back({OpKind::ReleaseLeftovers, -1, 0, 0, -net});
    ops.push_back({OpKind::ReleaseInput, -1, 0, 0, -costs.input_bytes(b)});  // kept by the last micro-batch
    seq.ops.push_back(std::move(ops));
    made.emplace_back(b, seq.ops.size() - 1);
    return seq.ops.size() - 1;
  };
  if (grad_cache) {
    append_grad_cache_step(costs, graph, *loss_model, choice, batches, cache, ops_for, seq);
    return seq;
  }
  append_micro_batch_segments(batches.runs, ops_for, seq);
  // The optimizer steps while the last micro-batch's input is still allocated, then it goes.
  std::vector<Op> optimizer{
      {OpKind::Optimizer, -1, worker_optimizer_ns(costs, choice), worker_optimizer_transient_bytes(costs, choice), 0}};
  if (!batches.runs.empty()) optimizer.push_back({OpKind::ReleaseInput, -1, 0, 0, -costs.input_bytes(batches.runs.back().size)});
  seq.ops.push_back(std::move(optimizer));
  seq.segments.push_back({seq.ops.size() - 1, 0, count, 1});
  return seq;
}

StepPrediction predict_step(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice,
                            BatchCostsCache* cache) {
  // A step that is not a sequence of micro-batches (L2L runs stage-major, every micro-batch
  // through a stage before the next) is its technique's to predict.
  if (const Technique* runner = step_runner(choice)) return runner->predict(costs, graph, choice);
  return predict_step(costs, graph, choice, step_batches(choice), cache);
}

StepPrediction predict_step(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice,
                            const StepBatches& batches, BatchCostsCache* cache) {
  if (step_runner(choice) != nullptr) throw std::logic_error("predict_step: that step is not a sequence of micro-batches");
  const StepSequence seq = step_sequence(costs, graph, choice, batches, cache);
  StepPrediction p;
  p.peak_bytes = -1;
  std::int64_t level = seq.static_bytes;
  // Segments of one size share their walk (the last micro-batch's kept input changes only what is
  // left after its ops, not its peak or time).
  std::vector<std::optional<Walk>> walks(seq.ops.size());
  for (const auto& segment : seq.segments) {
    const auto& ops = seq.ops[segment.ops];
    // A repeated segment ends where it started, so its repetitions peak alike.
    auto& known = walks[segment.ops];
    if (!known) known = walk(ops);
    const Walk& w = *known;
    p.step_ns = core::saturating_add(p.step_ns, core::saturating_mul(segment.repeat, w.duration_ns));
    if (level + w.peak_bytes > p.peak_bytes) {
      p.peak_bytes = level + w.peak_bytes;
      const Op& op = ops[static_cast<std::size_t>(w.peak_op)];
      p.peak_at = op.kind == OpKind::Optimizer ? std::string("optimizer step")
                  : op.layer < 0
                      ? std::string(op_kind_name(op.kind)) + " (micro-batch of " + std::to_string(segment.batch) + ")"
                      : std::string(op_kind_name(op.kind)) + " of " +
                            costs.trace().layers[static_cast<std::size_t>(op.layer)].name + " (micro-batch of " +
                            std::to_string(segment.batch) + ")";
    }
    for (std::size_t k = 0; k + (segment.keeps_input ? 1 : 0) < ops.size(); ++k) level += ops[k].retained_bytes;
    // The optimizer waits for what techniques add after the last micro-batch (data parallel's
    // all-reduce, which the last backward partly hides).
    if (segment.keeps_input) {
      for (const Technique* technique : techniques()) {
        p.step_ns = core::saturating_add(p.step_ns, technique->after_last_micro_batch_ns(costs, ops, choice));
      }
    }
  }
  // A step takes time even where the trace's layers and optimizer measured none (samples/s stays finite).
  p.step_ns = std::max<std::int64_t>(p.step_ns, 1);
  return p;
}

namespace {

// The step sequence as tasks, segment by segment. Bookkeeping ops take no time: an input's arrival
// joins the next task's start, releases join the previous task's end. A segment's bookkeeping stays
// inside it (it starts with its input's arrival and ends with the releases), so a repeated segment
// ends where it started.
class SequenceScheduler {
 public:
  SequenceScheduler(const core::CostModel& costs, const core::StepChoice& choice, const StepSequence& seq, core::Schedule& schedule)
      : costs_(costs), choice_(choice), seq_(seq), schedule_(schedule) {}

  void add_segments() {
    std::size_t task_count = 0;
    for (const auto& segment : seq_.segments) {
      for (const Op& op : seq_.ops[segment.ops]) {
        task_count += (op.layer >= 0 || op.kind == OpKind::Optimizer || op.kind == OpKind::GradientCache ||
                       op.kind == OpKind::CollectiveWait) +
                      (op.gather_ns > 0 || op.gather_prefetched) + (op.reduce_ns > 0) + (op.reduce_copy_ns > 0);
      }
    }
    schedule_.tasks.reserve(task_count);
    schedule_.repeats.reserve(seq_.segments.size());
    for (const auto& segment : seq_.segments) add_segment(segment);
  }

 private:
  void at_end_of_last(core::MemoryChange change) {
    if (previous_compute_ < 0) {
      pending_start_.push_back(change);
    } else {
      schedule_.tasks[static_cast<std::size_t>(previous_compute_)].at_end.push_back(change);
    }
  }
  std::vector<int> optimizer_waits_for(const StepSequence::Segment& segment);
  void add_segment(const StepSequence::Segment& segment);
  core::Task task_of(const Op& op, int micro_batch) const;
  // The next task on the compute thread (a gather's or a layer's), after the last one and what it waits for.
  int push_next(core::Task task) {
    if (previous_compute_ >= 0) task.dependencies.insert(task.dependencies.begin(), previous_compute_);
    task.dependencies.insert(task.dependencies.end(), waits_for_buffer_.begin(), waits_for_buffer_.end());
    waits_for_buffer_.clear();
    previous_compute_ = static_cast<int>(schedule_.tasks.size());
    schedule_.tasks.push_back(std::move(task));
    return previous_compute_;
  }
  void add_reduce(const core::Task& backward, std::int64_t reduce_ns);
  void add_reduce_copies(const core::Task& backward, std::int64_t copy_ns);
  void add_collective_wait(int micro_batch, const CollectiveWaits& waits);
  core::Task gather_task(const Op& op, int micro_batch) const;
  void prefetch_next(const std::vector<Op>& ops, std::size_t k, core::Task& task);

  const core::CostModel& costs_;
  const core::StepChoice& choice_;
  const StepSequence& seq_;
  core::Schedule& schedule_;
  // The last micro-batch's task per op, where its buckets' all-reduces wait for their backward.
  std::vector<int> last_task_of_op_;
  int previous_compute_ = -1;
  std::vector<core::MemoryChange> pending_start_;  // for the next task's start
  // Stage 2-3: this micro-batch's reduces so far, and the one whose buffer the next compute task fills.
  std::vector<int> reduces_;
  std::vector<int> waits_for_buffer_;
  int prefetch_ = -1;  // stage 3: the gather started one ahead
};

core::Task SequenceScheduler::gather_task(const Op& op, int micro_batch) const {
  core::Task gather;
  gather.name = "gather " + costs_.trace().layers[static_cast<std::size_t>(op.layer)].name;
  gather.category = "gather";
  gather.stream = core::Stream::Collective;
  gather.duration_ns = op.gather_ns;
  gather.layer = op.layer;
  gather.micro_batch = micro_batch;
  return gather;
}

// The gather ops[k] starts for a later op (Op::prefetch_ahead): it starts with `task` (op k's work,
// not yet pushed), after what that waits for, and its memory is allocated as that starts.
void SequenceScheduler::prefetch_next(const std::vector<Op>& ops, std::size_t k, core::Task& task) {
  if (ops[k].prefetch_ahead == 0) return;
  const Op& next = ops[k + static_cast<std::size_t>(ops[k].prefetch_ahead)];
  core::Task gather = gather_task(next, task.micro_batch);
  gather.dependencies = task.dependencies;
  if (previous_compute_ >= 0) gather.dependencies.push_back(previous_compute_);
  gather.dependencies.insert(gather.dependencies.end(), waits_for_buffer_.begin(), waits_for_buffer_.end());
  pending_start_.push_back({core::MemoryKind::GatheredParameter, next.gathered_bytes});
  prefetch_ = static_cast<int>(schedule_.tasks.size());
  schedule_.tasks.push_back(std::move(gather));
}

// A stage-2-3 worker's reduces of the buffer(s) the backward (the last task) filled, on the collective
// stream after what is queued there. Backward then fills the other buffer once the reduce before
// this one, from that buffer, is done: the next task on the compute thread waits for it.
void SequenceScheduler::add_reduce(const core::Task& backward, std::int64_t reduce_ns) {
  core::Task reduce;
  reduce.name = "reduce after " + backward.name;
  reduce.category = "reduce";
  reduce.stream = core::Stream::Collective;
  reduce.duration_ns = reduce_ns;
  reduce.layer = backward.layer;
  reduce.micro_batch = backward.micro_batch;
  reduce.dependencies = {previous_compute_};
  if (reduces_.size() >= 2) waits_for_buffer_.push_back(reduces_[reduces_.size() - 2]);
  reduces_.push_back(static_cast<int>(schedule_.tasks.size()));
  schedule_.tasks.push_back(std::move(reduce));
}

// The worker's copies for the reduces after a backward (Op::reduce_copy_ns), on the compute thread;
// the reduces of the buffer they fill start after them.
void SequenceScheduler::add_reduce_copies(const core::Task& backward, std::int64_t copy_ns) {
  core::Task copies;
  copies.name = "gradients of " + backward.name + " copied for the reduces";
  copies.category = "gradient copies";
  copies.duration_ns = copy_ns;
  copies.layer = backward.layer;
  copies.micro_batch = backward.micro_batch;
  push_next(std::move(copies));
}

// The micro-batch ends once its last reduce has: a task of no time of its own on the compute stream,
// then what its compute lost to the collectives beside it (`waits.beside_ns`).
void SequenceScheduler::add_collective_wait(int micro_batch, const CollectiveWaits& waits) {
  core::Task wait;
  wait.name = "wait for the reduces";
  wait.category = op_kind_name(OpKind::CollectiveWait);
  wait.micro_batch = micro_batch;
  if (!reduces_.empty()) wait.dependencies = {reduces_.back()};
  wait.at_start = std::move(pending_start_);
  pending_start_.clear();
  push_next(std::move(wait));
  reduces_.clear();
  waits_for_buffer_.clear();
  if (waits.beside_ns == 0) return;
  core::Task slowed;
  slowed.name = "compute slowed by the collectives beside it";
  slowed.category = std::string(kBesideComputeCategory);
  slowed.micro_batch = micro_batch;
  slowed.duration_ns = waits.beside_ns;
  push_next(std::move(slowed));
}

// The optimizer follows the last backward and what techniques add after it (data parallel's last
// bucket's all-reduce).
std::vector<int> SequenceScheduler::optimizer_waits_for(const StepSequence::Segment& segment) {
  std::vector<int> waits_for;
  if (segment.batch == 0 && &segment == &seq_.segments.back() && seq_.segments.size() >= 2) {
    const auto& last_ops = seq_.ops[seq_.segments[seq_.segments.size() - 2].ops];
    for (const Technique* technique : techniques()) {
      const int task = technique->append_after_last_micro_batch(costs_, last_ops, choice_, last_task_of_op_, schedule_);
      if (task >= 0) waits_for.push_back(task);
    }
  }
  return waits_for;
}

void SequenceScheduler::add_segment(const StepSequence::Segment& segment) {
  using core::MemoryKind;
  const auto& ops = seq_.ops[segment.ops];
  const std::size_t count = ops.size() - (segment.keeps_input ? 1 : 0);
  const auto first_task = static_cast<int>(schedule_.tasks.size());
  // Tasks name their micro-batch as an int; a step of more is refused by the planner's bounds.
  const int micro_batch = segment.batch > 0 ? static_cast<int>(segment.first) : -1;
  if (segment.keeps_input) last_task_of_op_.assign(ops.size(), -1);
  const std::vector<int> waits_for = optimizer_waits_for(segment);
  for (std::size_t k = 0; k < count; ++k) {
    const Op& op = ops[k];
    switch (op.kind) {
      case OpKind::LoadInput: pending_start_.push_back({MemoryKind::Input, op.retained_bytes}); continue;
      case OpKind::ReleaseLeftovers: at_end_of_last({MemoryKind::Activation, op.retained_bytes}); continue;
      case OpKind::ReleaseInput: at_end_of_last({MemoryKind::Input, op.retained_bytes}); continue;
      case OpKind::CollectiveWait: add_collective_wait(micro_batch, collective_waits(ops, choice_.data_parallel->link.beside_compute)); continue;
      default: break;
    }
    core::Task task = task_of(op, micro_batch);
    // A stage-3 worker's gather, on the collective stream (each worker's lane), before the layer's
    // work: started by the gathering op before it (prefetched), or as the op is reached.
    if (op.gather_prefetched) {
      task.dependencies.push_back(prefetch_);
    } else {
      if (op.gathered_bytes != 0) pending_start_.push_back({MemoryKind::GatheredParameter, op.gathered_bytes});
      if (op.gather_ns > 0) {
        core::Task gather = gather_task(op, task.micro_batch);
        gather.at_start = std::move(pending_start_);
        pending_start_.clear();
        push_next(std::move(gather));
      }
    }
    prefetch_next(ops, k, task);
    task.at_start.insert(task.at_start.begin(), pending_start_.begin(), pending_start_.end());
    pending_start_.clear();
    if (op.kind == OpKind::Optimizer) task.dependencies = waits_for;
    const int pushed = push_next(std::move(task));
    if (segment.keeps_input) last_task_of_op_[k] = pushed;
    if (op.reduce_copy_ns > 0) add_reduce_copies(schedule_.tasks[static_cast<std::size_t>(pushed)], op.reduce_copy_ns);
    if (op.reduce_ns > 0) add_reduce(schedule_.tasks[static_cast<std::size_t>(pushed)], op.reduce_ns);
  }
  const int made = static_cast<int>(schedule_.tasks.size()) - first_task;
  if (segment.repeat > 1 && made > 0) schedule_.repeats.push_back({first_task, made, segment.repeat});
}

// An op that takes time, as a task before its dependencies and what starts with it.
core::Task SequenceScheduler::task_of(const Op& op, int micro_batch) const {
  using core::MemoryKind;
  core::Task task;
  if (op.kind == OpKind::Optimizer) {
    task.name = "optimizer." + costs_.trace().optimizer.name;
    task.category = "optimizer";
  } else if (op.kind == OpKind::GradientCache) {
    // A task of its own, so the cache is allocated before a run of micro-batches starts.
    task.name = "gradient cache";
    task.category = op_kind_name(op.kind);
    task.at_end = {{MemoryKind::Activation, op.retained_bytes}};
  } else {
    task.name = costs_.trace().layers[static_cast<std::size_t>(op.layer)].name;
    task.category = op_kind_name(op.kind);
    task.at_end = {{MemoryKind::Activation, op.retained_bytes - op.kept_gathered_bytes}};
    // A stage-3 worker's gathered parameters (gathered as the op starts: add_segment) go as it ends,
    // or stay for the backward after a recompute.
    if (op.kept_gathered_bytes != op.gathered_bytes) {
      task.at_end.push_back({MemoryKind::GatheredParameter, op.kept_gathered_bytes - op.gathered_bytes});
    }
    task.layer = op.layer;
    task.micro_batch = micro_batch;
  }
  task.duration_ns = op.duration_ns;
  // Gathered and prefetched parameters are allocated as the op starts (add_segment).
  task.transient_bytes = op.transient_bytes - op.gathered_bytes - op.prefetched_bytes;
  return task;
}

}  // namespace

core::Schedule build_schedule(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice) {
  using core::MemoryKind;
  if (const Technique* runner = step_runner(choice)) return runner->schedule(costs, graph, choice);
  const StepSequence seq = step_sequence(costs, graph, choice);
  core::Schedule schedule;
  schedule.resident = {{MemoryKind::Parameter, worker_parameter_bytes(costs, choice) + costs.model_extra_bytes()},
                       {MemoryKind::Gradient, worker_gradient_bytes(costs, choice)},
                       {MemoryKind::OptimizerState, worker_optimizer_state_bytes(costs, choice)},
                       {MemoryKind::Workspace, costs.workspace_bytes()}};
  // A data-parallel worker's communication buckets are counted with the gradients they carry.
  if (const std::int64_t buckets = bucket_buffer_bytes(costs, choice); buckets > 0) {
    schedule.resident.push_back({MemoryKind::Gradient, buckets});
  }
  schedule.workers = choice.workers();
  SequenceScheduler(costs, choice, seq, schedule).add_segments();
  schedule.samples = choice.samples();
  return schedule;
}

namespace {

// Micro-batching as a technique: the step sequence above is its model; the search picks the split.
class MicroBatching final : public Technique {
 public:
  std::optional<Strategy> strategy() const override { return Strategy::MicroBatching; }
  bool used_by(const core::StepChoice& choice) const override { return choice.worker_micro_batches(0).size() > 1; }
  void open(SearchSpace& space, const core::Trace&, const LayerGraph&, const PlanRequest& request) const override {
    space.micro_batching = request.strategies.contains(Strategy::MicroBatching);
  }
};

}  // namespace

const Technique& micro_batching_technique() {
  static const MicroBatching technique;
  return technique;
}

}  // namespace headroom::planner
