#include "planner/l2l_model.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace headroom::planner {

std::vector<L2LStage> l2l_stages(const core::Trace& trace) {
  std::vector<L2LStage> stages;
  std::vector<int> stage_of(trace.layers.size());
  for (std::size_t i = 0; i < trace.layers.size(); ++i) {
    if (stages.empty() || trace.layers[i].block != trace.layers[static_cast<std::size_t>(stages.back().last)].block) {
      stages.push_back({static_cast<int>(i), static_cast<int>(i), 0, {}, {}});
    }
    stages.back().last = static_cast<int>(i);
    stages.back().parameter_bytes += trace.layers[i].param_bytes;
    stage_of[i] = static_cast<int>(stages.size()) - 1;
  }
  const auto add = [](std::vector<int>& to, int j) {
    if (std::find(to.begin(), to.end(), j) == to.end()) to.push_back(j);
  };
  for (std::size_t i = 0; i < trace.layers.size(); ++i) {
    for (const int j : trace.layers[i].inputs) {
      if (j < 0 || stage_of[static_cast<std::size_t>(j)] == stage_of[i]) continue;
      add(stages[static_cast<std::size_t>(stage_of[i])].inputs, j);
      add(stages[static_cast<std::size_t>(stage_of[static_cast<std::size_t>(j)])].exports, j);
    }
  }
  return stages;
}

namespace {

std::int64_t scaled(std::int64_t ns, double scale) { return std::llround(static_cast<double>(ns) * scale); }

}  // namespace

L2LPrediction predict_l2l_step(const core::CostModel& costs, const LayerGraph& graph,
                               const std::vector<std::int64_t>& micro_batches, bool boundaries_on_host) {
  const core::Trace& trace = costs.trace();
  const auto stages = l2l_stages(trace);
  const std::size_t n = micro_batches.size();
  const int last_stage = static_cast<int>(stages.size()) - 1;
  std::vector<int> stage_of(trace.layers.size()), first_reader_stage(trace.layers.size(), -1);
  for (std::size_t s = 0; s < stages.size(); ++s) {
    for (int i = stages[s].first; i <= stages[s].last; ++i) stage_of[static_cast<std::size_t>(i)] = static_cast<int>(s);
  }
  for (std::size_t i = 0; i < trace.layers.size(); ++i) {
    for (const int j : trace.layers[i].inputs) {
      if (j < 0 || stage_of[static_cast<std::size_t>(j)] == stage_of[i]) continue;
      int& first = first_reader_stage[static_cast<std::size_t>(j)];
      if (first < 0 || stage_of[i] < first) first = stage_of[i];
    }
  }

  std::map<std::int64_t, std::vector<core::LayerCost>> by_batch;
  const auto cost = [&](int layer, std::int64_t b) -> const core::LayerCost& {
    auto& layers = by_batch[b];
    if (layers.empty()) {
      for (std::size_t i = 0; i < costs.layer_count(); ++i) layers.push_back(costs.layer(i, b));
    }
    return layers[static_cast<std::size_t>(layer)];
  };
  const auto out = [&](int layer, std::int64_t b) { return cost(layer, b).output_bytes; };
  const auto sum_out = [&](const std::vector<int>& layers, std::int64_t b) {
    std::int64_t bytes = 0;
    for (const int j : layers) bytes += out(j, b);
    return bytes;
  };
  const auto param = [&](int s) { return s >= 0 && s <= last_stage ? stages[static_cast<std::size_t>(s)].parameter_bytes : 0; };

  L2LPrediction p;
  p.device_peak_bytes = -1;
  const auto consider = [&](std::int64_t bytes, const std::string& phase, int s, std::size_t m) {
    if (bytes <= p.device_peak_bytes) return;
    p.device_peak_bytes = bytes;
    const auto& stage = stages[static_cast<std::size_t>(s)];
    p.peak_at = phase + " of stage " + std::to_string(s) + " (" + trace.layers[static_cast<std::size_t>(stage.first)].name +
                ".." + trace.layers[static_cast<std::size_t>(stage.last)].name + "), micro-batch " + std::to_string(m);
  };

  std::int64_t base = 0;  // every micro-batch's input, made as the step starts
  for (const auto b : micro_batches) base += costs.input_bytes(b);
  std::int64_t stash = 0;  // stashed boundaries on the device
  std::vector<std::vector<bool>> stashed(n, std::vector<bool>(trace.layers.size(), false));

  // Forward without grad, stage by stage; the next stage's parameters arrive meanwhile.
  for (int s = 0; s <= last_stage; ++s) {
    const auto& stage = stages[static_cast<std::size_t>(s)];
    const std::int64_t params = param(s) + param(s + 1);
    for (std::size_t m = 0; m < n; ++m) {
      const std::int64_t b = micro_batches[m];
      std::int64_t live = 0;  // this stage's outputs still to be read
      for (int i = stage.first; i <= stage.last; ++i) {
        const auto& c = cost(i, b);
        consider(base + stash + params + live + c.fwd_transient_bytes, "forward", s, m);
        live += c.output_bytes;
        for (const int j : trace.layers[static_cast<std::size_t>(i)].inputs) {
          if (j >= stage.first && graph.last_reader(j) == i &&
              std::find(stage.exports.begin(), stage.exports.end(), j) == stage.exports.end()) {
            live -= out(j, b);
          }
        }
        p.compute_ns += scaled(c.fwd_ns, costs.layer_time_scale(b));
      }
      for (const int j : stage.exports) stashed[m][static_cast<std::size_t>(j)] = true;
      if (!boundaries_on_host) stash += sum_out(stage.exports, b);
    }
  }

  // Backward in reverse: each stage re-run with grad from its stashed inputs, then backpropagated;
  // the previous stage's parameters arrive meanwhile, and the stage's gradients build up until they
  // go to the host as the stage ends.
  std::int64_t boundary_grads = 0;  // gradients waiting at stage boundaries, on the device
  for (int s = last_stage; s >= 0; --s) {
    const auto& stage = stages[static_cast<std::size_t>(s)];
    const std::int64_t params = param(s) + param(s - 1);
    // The stage's gradients: its first micro-batch's backward keeps each layer's parameter gradient
    // as it is made (the profiled steps accumulated into gradients already there); later ones add to them.
    std::int64_t gradients = 0;
    for (std::size_t m = 0; m < n; ++m) {
      const std::int64_t b = micro_batches[m];
      const double scale = costs.layer_time_scale(b);
      // The constant-memory variant brings the stage's inputs and the gradients at its outputs over.
      const std::int64_t brought = boundaries_on_host ? sum_out(stage.inputs, b) + sum_out(stage.exports, b) : 0;
      std::int64_t level = base + stash + boundary_grads + params + gradients + brought;
      for (int i = stage.first; i <= stage.last; ++i) {
        const auto& c = cost(i, b);
        consider(level + c.fwd_transient_bytes, "recompute", s, m);
        level += c.fwd_retained_bytes;
        // A stage input's free by its last reader does not happen: the stash holds it.
        for (const int j : trace.layers[static_cast<std::size_t>(i)].inputs) {
          if (j >= 0 && j < stage.first && graph.last_reader(j) == i && !graph.output_saved(j)) level += out(j, b);
        }
        p.compute_ns += scaled(c.fwd_ns, scale);
      }
      for (int r = stage.last; r >= stage.first; --r) {
        const auto& c = cost(r, b);
        consider(level + c.bwd_transient_bytes, "backward", s, m);
        level += c.bwd_retained_bytes;
        // The gradient arriving at an exported output was freed by this backward in the profiled
        // step; here the relay holds it (it seeded the stage's backward) until the stage is done.
        if (std::find(stage.exports.begin(), stage.exports.end(), r) != stage.exports.end()) level += out(r, b);
        if (m == 0) {
          level += trace.layers[static_cast<std::size_t>(r)].param_bytes;
          gradients += trace.layers[static_cast<std::size_t>(r)].param_bytes;
        }
        p.compute_ns += scaled(c.bwd_ns, scale);
      }
      // What stays: the gradients at the stage's inputs; what goes: those at its outputs, and the
      // stashed inputs this stage was the first to read.
      if (!boundaries_on_host) boundary_grads += sum_out(stage.inputs, b) - sum_out(stage.exports, b);
      for (const int j : stage.inputs) {
        if (first_reader_stage[static_cast<std::size_t>(j)] != s || !stashed[m][static_cast<std::size_t>(j)]) continue;
        stashed[m][static_cast<std::size_t>(j)] = false;
        if (!boundaries_on_host) stash -= out(j, b);
      }
    }
  }

  std::int64_t total_params = 0;
  for (const auto& stage : stages) {
    total_params += stage.parameter_bytes;
    p.largest_stage_parameter_bytes = std::max(p.largest_stage_parameter_bytes, stage.parameter_bytes);
  }
  p.host_bytes = 2 * total_params + costs.optimizer_state_bytes();
  // Forward loads every stage, backward every stage but the last (still loaded); gradients go back.
  p.copy_bytes = 2 * total_params - param(last_stage) + total_params;
  p.host_optimizer_ns = costs.optimizer_ns();
  // The host steps stage s while the device works on stage s-1; stage 0's step has nothing to hide behind.
  const std::int64_t exposed =
      total_params > 0 ? std::llround(static_cast<double>(p.host_optimizer_ns) * static_cast<double>(param(0)) /
                                      static_cast<double>(total_params))
                       : 0;
  p.step_ns = std::max<std::int64_t>(p.compute_ns + exposed, 1);
  return p;
}

}  // namespace headroom::planner
