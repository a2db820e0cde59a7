#include "core/trace_merge.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/calibration.h"
#include "core/errors.h"
#include "core/rescale.h"

namespace headroom::core {

namespace {

[[noreturn]] void differ(const std::string& what) {
  throw InputError("--add-to: the traces differ in " + what + "; sizes are added only to a trace of the same model, "
                   "machine and profiling options");
}

// Where each merged batch size comes from: base's sample k (true) or added's (false).
struct Source {
  bool base;
  std::size_t index;
};

template <typename T>
std::vector<T> merged(const std::vector<T>& base, const std::vector<T>& added, const std::vector<Source>& order) {
  std::vector<T> out;
  out.reserve(order.size());
  for (const Source& s : order) out.push_back(s.base ? base[s.index] : added[s.index]);
  return out;
}

void expect_same_layers(const Trace& base, const Trace& added) {
  if (base.layers.size() != added.layers.size()) {
    differ("their layers (" + std::to_string(base.layers.size()) + " against " + std::to_string(added.layers.size()) + ")");
  }
  for (std::size_t i = 0; i < base.layers.size(); ++i) {
    const LayerProfile& a = base.layers[i];
    const LayerProfile& b = added.layers[i];
    if (a.name != b.name || a.kind != b.kind || a.block != b.block || a.inputs != b.inputs ||
        a.saves_inputs != b.saves_inputs || a.param_bytes != b.param_bytes || a.frozen_param_bytes != b.frozen_param_bytes || a.keeps_output != b.keeps_output ||
        a.tempo.has_value() != b.tempo.has_value() || a.checkpointed.empty() != b.checkpointed.empty() ||
        (a.tempo && (a.tempo->saves_inputs != b.tempo->saves_inputs || a.tempo->keeps_output != b.tempo->keeps_output))) {
      differ("layer " + std::to_string(i) + " (" + a.name + ")");
    }
  }
}

// One precision's trace; `added` measured the same precision.
Trace merge_one(const Trace& base, Trace added) {
  if (base.device.kind != added.device.kind || base.device.name != added.device.name) {
    differ("their device (" + base.device.name + " against " + added.device.name + ")");
  }
  if (base.framework.at("torch") != added.framework.at("torch")) differ("their torch version");
  if (base.host_memory_regime != added.host_memory_regime) differ("their host-memory regime");
  if (base.optimizer.name != added.optimizer.name) {
    differ("their optimizer (" + base.optimizer.name + " against " + added.optimizer.name + ")");
  }
  if (base.profile.threads != added.profile.threads) {
    differ("their threads (" + std::to_string(base.profile.threads) + " against " + std::to_string(added.profile.threads) +
           "; give --threads " + std::to_string(base.profile.threads) + ")");
  }
  if (base.has_tempo() != added.has_tempo()) {
    differ("the Tempo pass (one has it and the other not: --no-tempo, or a bf16-autocast or bf16 trace from before the "
           "pass ran in it; profile every size again)");
  }
  expect_same_layers(base, added);
  if (base.measures_inputs_held() != added.measures_inputs_held()) differ("what they measured (one is from an older headroom)");
  if (base.steps.front().sequence.has_value() != added.steps.front().sequence.has_value()) {
    differ("what they measured (one is from an older headroom)");
  }
  if (base.contrastive_loss.has_value() != added.contrastive_loss.has_value()) differ("the contrastive loss's profile");
  if (base.calibration.has_value() != added.calibration.has_value()) differ("their calibration (one has none)");

  // The added sizes' times as on the machine the base's were measured on, where it ran at another speed.
  if (base.calibration && added.calibration) {
    const SpeedRatio ratio = speed_ratio(*added.calibration, *base.calibration);
    if (ratio.differs) added = rescaled(added, ratio, *base.calibration);
  }

  std::vector<Source> order;
  std::size_t i = 0, j = 0;
  while (i < base.batch_sizes.size() || j < added.batch_sizes.size()) {
    if (j == added.batch_sizes.size() || (i < base.batch_sizes.size() && base.batch_sizes[i] < added.batch_sizes[j])) {
      order.push_back({true, i++});
    } else if (i == base.batch_sizes.size() || added.batch_sizes[j] < base.batch_sizes[i]) {
      order.push_back({false, j++});
    } else {
      expect_sizes_absent(base, {base.batch_sizes[i]});
    }
  }

  Trace out = base;
  out.batch_sizes = merged(base.batch_sizes, added.batch_sizes, order);
  for (std::size_t k = 0; k < out.layers.size(); ++k) {
    LayerProfile& layer = out.layers[k];
    const LayerProfile& more = added.layers[k];
    layer.samples = merged(base.layers[k].samples, more.samples, order);
    if (layer.tempo) layer.tempo->samples = merged(base.layers[k].tempo->samples, more.tempo->samples, order);
    if (!layer.checkpointed.empty()) layer.checkpointed = merged(base.layers[k].checkpointed, more.checkpointed, order);
  }
  // Each step's peak carries its own trace's library workspace (a GPU's): the merged trace keeps the
  // smaller, and each step's peak is made to carry that.
  out.workspace_bytes = std::min(base.workspace_bytes, added.workspace_bytes);
  const auto carrying = [&](std::vector<StepSample> steps, std::int64_t workspace) {
    for (auto& s : steps) s.peak_bytes -= workspace - out.workspace_bytes;
    return steps;
  };
  out.steps = merged(carrying(base.steps, base.workspace_bytes), carrying(added.steps, added.workspace_bytes), order);
  if (out.has_tempo()) {
    out.tempo_steps =
        merged(carrying(base.tempo_steps, base.workspace_bytes), carrying(added.tempo_steps, added.workspace_bytes), order);
  }
  if (out.optimizer.host_ns_per_param <= 0) out.optimizer.host_ns_per_param = added.optimizer.host_ns_per_param;
  return out;
}

}  // namespace

void expect_same_model(const ModelInfo& base, const ModelInfo& added) {
  if (!(base == added)) {
    differ("their model (" + base.name + (base.file ? " from " + base.file->path : std::string()) + " against " + added.name +
           (added.file ? " from " + added.file->path : std::string()) + ", or its settings)");
  }
}

void expect_sizes_absent(const Trace& base, const std::vector<std::int64_t>& batch_sizes) {
  for (const std::int64_t b : batch_sizes) {
    if (base.batch_index(b) >= 0) {
      throw InputError("--add-to: batch size " + std::to_string(b) + " is in the trace already; give only sizes it lacks");
    }
  }
}

Trace with_batch_sizes_added(const Trace& base, const Trace& added) {
  expect_same_model(base.model, added.model);
  if (base.precisions() != added.precisions()) {
    differ("their precisions (" + base.precision_list() + " against " + added.precision_list() + ")");
  }
  Trace out = merge_one(base, added);
  out.other_precisions.clear();
  for (std::size_t k = 0; k < base.other_precisions.size(); ++k) {
    const Trace* more = added.in_precision(base.other_precisions[k].precision);
    out.other_precisions.push_back(merge_one(base.other_precisions[k], *more));
  }
  // The merged document is read back as any trace is: whatever limit it breaks is named.
  return trace_from_json(to_json(out), "the trace with the sizes added");
}

}  // namespace headroom::core
