#include "planner/micro_batch_model.h"

#include <algorithm>
#include <cmath>

#include "core/saturating.h"

namespace headroom::planner {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::Forward: return "forward";
    case OpKind::ForwardNoGrad: return "forward (checkpointed, no grad)";
    case OpKind::Recompute: return "recompute";
    case OpKind::Backward: return "backward";
  }
  return "?";
}

namespace {

// A layer's time scaled to the step, held at the trace's limit for one duration (the scale of a
// trace whose layers measured next to nothing can be huge).
std::int64_t scaled(std::int64_t ns, double scale) {
  return std::llround(std::min(static_cast<double>(ns) * scale, static_cast<double>(core::kMaxTraceNs)));
}

// For each layer, the block span it belongs to if that block is checkpointed, else nullptr.
std::vector<const BlockSpan*> checkpointed_span_of(const LayerGraph& graph, const std::vector<bool>& checkpointed,
                                                   std::size_t layers) {
  std::vector<const BlockSpan*> span_of(layers, nullptr);
  const auto& blocks = graph.blocks();
  for (std::size_t k = 0; k < blocks.size() && k < checkpointed.size(); ++k) {
    if (!checkpointed[k] || !blocks[k].checkpointable) continue;
    for (int i = blocks[k].first; i <= blocks[k].last; ++i) span_of[static_cast<std::size_t>(i)] = &blocks[k];
  }
  return span_of;
}

}  // namespace

BatchCosts batch_costs(const core::CostModel& costs, std::int64_t batch) {
  BatchCosts out;
  out.batch = batch;
  out.scale = costs.layer_time_scale(batch);
  out.layers.reserve(costs.layer_count());
  out.lean.reserve(costs.layer_count());
  for (std::size_t i = 0; i < costs.layer_count(); ++i) {
    out.layers.push_back(costs.layer(i, batch));
    // Only layers with a lean profile are evaluated twice.
    out.lean.push_back(costs.has_lean_variant(i) ? costs.lean_layer(i, batch) : out.layers.back());
  }
  return out;
}

std::int64_t lean_saved_bytes(const BatchCosts& costs, const LayerGraph& graph, int layer) {
  const auto i = static_cast<std::size_t>(layer);
  std::int64_t saved = costs.layers[i].fwd_retained_bytes - costs.lean[i].fwd_retained_bytes;
  for (const auto& released : graph.released_inputs(layer)) {
    saved += costs.layers[static_cast<std::size_t>(released.producer)].output_bytes;
  }
  const HeldOutput& held = graph.held_output(layer);
  if (held.released_by >= 0 && !held.in_backward) saved -= costs.layers[i].output_bytes;
  return saved;
}

namespace {

std::vector<bool> effective_lean(const LayerGraph& graph, const std::vector<const BlockSpan*>& span_of,
                                 const std::vector<bool>& lean) {
  std::vector<bool> out(graph.size(), false);
  for (std::size_t i = 0; i < out.size() && i < lean.size(); ++i) {
    out[i] = lean[i] && span_of[i] == nullptr && graph.can_be_lean(static_cast<int>(i));
  }
  return out;
}

}  // namespace

std::vector<bool> effective_lean(const LayerGraph& graph, const std::vector<bool>& checkpointed,
                                 const std::vector<bool>& lean) {
  if (lean.empty()) return std::vector<bool>(graph.size(), false);
  return effective_lean(graph, checkpointed_span_of(graph, checkpointed, graph.size()), lean);
}

std::vector<Op> micro_batch_ops(const core::CostModel& costs, const LayerGraph& graph, std::int64_t batch,
                                const std::vector<bool>& checkpointed, const std::vector<bool>& lean) {
  return micro_batch_ops(batch_costs(costs, batch), graph, checkpointed, 0, static_cast<int>(costs.layer_count()) - 1,
                         lean);
}

std::vector<Op> micro_batch_ops(const BatchCosts& costs, const LayerGraph& graph, const std::vector<bool>& checkpointed,
                                int first, int last, const std::vector<bool>& lean) {
  const std::size_t n = costs.layers.size();
  const double scale = costs.scale;
  const auto span_of = checkpointed_span_of(graph, checkpointed, n);
  // A lean layer runs at its Tempo cost, and an input it no longer keeps is freed by its last
  // reader's forward (measured there as a smaller net change). Without lean layers the costs are
  // used as they are, not copied.
  const auto lean_now = effective_lean(graph, span_of, lean);
  std::vector<core::LayerCost> adjusted;
  if (std::find(lean_now.begin(), lean_now.end(), true) != lean_now.end()) adjusted = costs.layers;
  const std::vector<core::LayerCost>& cost = adjusted.empty() ? costs.layers : adjusted;
  for (std::size_t i = 0; i < n && !adjusted.empty(); ++i) {
    if (!lean_now[i]) continue;
    adjusted[i] = costs.lean[i];
    for (const auto& released : graph.released_inputs(static_cast<int>(i))) {
      adjusted[static_cast<std::size_t>(released.freed_by)].fwd_retained_bytes -=
          costs.layers[static_cast<std::size_t>(released.producer)].output_bytes;
    }
    const HeldOutput& held = graph.held_output(static_cast<int>(i));
    if (held.released_by >= 0) {
      auto& releaser = adjusted[static_cast<std::size_t>(held.released_by)];
      (held.in_backward ? releaser.bwd_retained_bytes : releaser.fwd_retained_bytes) += costs.layers[i].output_bytes;
    }
  }

  // An unsaved block input is freed by its last reader in a normal forward; a checkpoint holds it
  // until the block's backward is done instead.
  const auto unsaved_input_bytes = [&](const BlockSpan& span) -> std::int64_t {
    if (span.input < 0 || graph.output_saved(span.input)) return 0;
    const int reader = graph.last_reader(span.input);
    return (reader >= span.first && reader <= span.last) ? cost[static_cast<std::size_t>(span.input)].output_bytes : 0;
  };

  std::vector<Op> ops;
  ops.reserve(3 * static_cast<std::size_t>(last - first + 1));
  for (std::size_t i = static_cast<std::size_t>(first); i <= static_cast<std::size_t>(last); ++i) {
    const auto& c = cost[i];
    const BlockSpan* span = span_of[i];
    if (span == nullptr) {
      ops.push_back({OpKind::Forward, static_cast<int>(i), scaled(c.fwd_ns, scale), c.fwd_transient_bytes,
                     c.fwd_retained_bytes});
      continue;
    }
    // Without grad nothing is saved: a layer holds its transient plus the block outputs still to
    // be read; at the end only the block's output remains.
    std::int64_t live_inside = 0;
    for (int j = span->first; j < static_cast<int>(i); ++j) {
      if (graph.last_reader(j) >= static_cast<int>(i)) live_inside += cost[static_cast<std::size_t>(j)].output_bytes;
    }
    const bool block_output = static_cast<int>(i) == span->last;
    ops.push_back({OpKind::ForwardNoGrad, static_cast<int>(i), scaled(c.fwd_ns, scale), c.fwd_transient_bytes + live_inside,
                   block_output ? c.output_bytes : 0});
  }
  for (std::size_t r = static_cast<std::size_t>(last) + 1; r-- > static_cast<std::size_t>(first);) {
    const auto& c = cost[r];
    const BlockSpan* span = span_of[r];
    if (span != nullptr && static_cast<int>(r) == span->last) {
      // Entering a checkpointed block from above: re-run its forward with grad first.
      for (int i = span->first; i <= span->last; ++i) {
        const auto& ci = cost[static_cast<std::size_t>(i)];
        std::int64_t retained = ci.fwd_retained_bytes;
        // The block input's free by its last reader does not happen: the checkpoint holds it.
        if (span->input >= 0 && graph.last_reader(span->input) == i) retained += unsaved_input_bytes(*span);
        ops.push_back({OpKind::Recompute, i, scaled(ci.fwd_ns, scale), ci.fwd_transient_bytes, retained});
      }
      // The recomputed output is held until the block's backward ends, where it is released.
    }
    std::int64_t retained = c.bwd_retained_bytes;
    if (span != nullptr && static_cast<int>(r) == span->first) {
      // The block's backward is done: the recomputed output and the held input go.
      retained -= cost[static_cast<std::size_t>(span->last)].output_bytes + unsaved_input_bytes(*span);
    }
    ops.push_back({OpKind::Backward, static_cast<int>(r), scaled(c.bwd_ns, scale), c.bwd_transient_bytes, retained});
  }
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

StepPrediction predict_step(const core::CostModel& costs, const LayerGraph& graph,
                            const std::vector<std::int64_t>& micro_batches, const std::vector<bool>& checkpointed,
                            const std::vector<bool>& lean) {
  StepPrediction p;
  const std::int64_t base = costs.static_bytes();
  // The optimizer steps while the last micro-batch's input is still allocated.
  p.peak_bytes = base + costs.input_bytes(micro_batches.back()) + costs.optimizer_transient_bytes();
  p.peak_at = "optimizer step";
  // Micro-batches run one after another and free their activations in between: every micro-batch
  // of the same size has the same peak, so each distinct size is walked once.
  std::vector<std::int64_t> sizes = micro_batches;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (const std::int64_t b : sizes) {
    const auto ops = micro_batch_ops(costs, graph, b, checkpointed, lean);
    const Walk w = walk(ops);
    const std::int64_t count = std::count(micro_batches.begin(), micro_batches.end(), b);
    p.step_ns = core::saturating_add(p.step_ns, core::saturating_mul(count, w.duration_ns));
    const std::int64_t peak = base + costs.input_bytes(b) + w.peak_bytes;
    if (peak > p.peak_bytes) {
      p.peak_bytes = peak;
      const Op& op = ops[static_cast<std::size_t>(w.peak_op)];
      p.peak_at = std::string(op_kind_name(op.kind)) + " of " + costs.trace().layers[static_cast<std::size_t>(op.layer)].name +
                  " (micro-batch of " + std::to_string(b) + ")";
    }
  }
  p.step_ns = core::saturating_add(p.step_ns, costs.optimizer_ns());
  // A step takes time even where the trace's layers and optimizer measured none (samples/s stays finite).
  p.step_ns = std::max<std::int64_t>(p.step_ns, 1);
  return p;
}

core::Schedule build_schedule(const core::CostModel& costs, const LayerGraph& graph,
                              const std::vector<std::int64_t>& micro_batches, const std::vector<bool>& checkpointed,
                              const std::vector<bool>& lean) {
  using core::MemoryKind;
  core::Schedule schedule;
  schedule.resident = {{MemoryKind::Parameter, costs.param_bytes()},
                       {MemoryKind::Gradient, costs.gradient_bytes()},
                       {MemoryKind::OptimizerState, costs.optimizer_state_bytes()}};
  const auto& layers = costs.trace().layers;
  // Micro-batches of one size run the same ops: build them once per distinct size (a split has at
  // most two).
  std::vector<std::pair<std::int64_t, std::vector<Op>>> ops_by_size;
  schedule.tasks.reserve(micro_batches.size() * 2 * layers.size() + 1);
  for (std::size_t m = 0; m < micro_batches.size(); ++m) {
    const std::int64_t b = micro_batches[m];
    auto known = std::find_if(ops_by_size.begin(), ops_by_size.end(), [b](const auto& entry) { return entry.first == b; });
    if (known == ops_by_size.end()) {
      ops_by_size.emplace_back(b, micro_batch_ops(costs, graph, b, checkpointed, lean));
      known = ops_by_size.end() - 1;
    }
    const std::vector<Op>& ops = known->second;
    std::int64_t net = 0;
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const Op& op = ops[k];
      core::Task task;
      task.name = layers[static_cast<std::size_t>(op.layer)].name;
      task.category = op_kind_name(op.kind);
      task.duration_ns = op.duration_ns;
      task.transient_bytes = op.transient_bytes;
      task.at_end = {{MemoryKind::Activation, op.retained_bytes}};
      task.layer = op.layer;
      task.micro_batch = static_cast<int>(m);
      if (!schedule.tasks.empty()) task.dependencies = {static_cast<int>(schedule.tasks.size()) - 1};
      if (k == 0) task.at_start = {{MemoryKind::Input, costs.input_bytes(b)}};
      net += op.retained_bytes;
      if (k + 1 == ops.size()) {
        // The micro-batch is done: what its measured changes leave over (the loss value and the
        // like) goes, so every micro-batch starts from the same level; its input goes too, except
        // the last one's, which stays until the optimizer has stepped.
        task.at_end.push_back({MemoryKind::Activation, -net});
        if (m + 1 < micro_batches.size()) task.at_end.push_back({MemoryKind::Input, -costs.input_bytes(b)});
      }
      schedule.tasks.push_back(std::move(task));
    }
  }
  core::Task optimizer;
  optimizer.name = "optimizer." + costs.trace().optimizer.name;
  optimizer.category = "optimizer";
  optimizer.duration_ns = costs.optimizer_ns();
  optimizer.transient_bytes = costs.optimizer_transient_bytes();
  if (!micro_batches.empty()) optimizer.at_end = {{MemoryKind::Input, -costs.input_bytes(micro_batches.back())}};
  if (!schedule.tasks.empty()) optimizer.dependencies = {static_cast<int>(schedule.tasks.size()) - 1};
  schedule.tasks.push_back(optimizer);
  for (const auto b : micro_batches) schedule.samples += b;
  return schedule;
}

}  // namespace headroom::planner
