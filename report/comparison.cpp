#include "report/comparison.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "core/cost_model.h"
#include "core/errors.h"
#include "core/sharding.h"
#include "core/units.h"
#include "planner/layer_graph.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "planner/strategy_table.h"

namespace headroom::report {

double Change::fraction() const {
  if (base == next) return 0;
  if (base == 0) return next > 0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  return (next - base) / std::fabs(base);
}

double LayerComparison::largest_memory_delta() const {
  // Per sample only: a layer's parameters are bytes of another kind (they do not grow with the
  // batch), and an embedding's would otherwise head every table.
  double largest = 0;
  for (const auto& c : memory) {
    if (c.what.find("/sample") != std::string::npos) largest = std::max(largest, std::fabs(c.delta()));
  }
  return largest;
}

namespace {

std::string percent(double fraction) {
  if (std::isinf(fraction)) return fraction > 0 ? "new" : "gone";
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f%%", 100 * fraction);
  return text;
}

// Per sample over the common batch sizes: the slope between the smallest and the largest (memory
// is affine in the batch: docs/design.md, "Fits"), or the value over the batch when only one is common.
double per_sample(const std::vector<std::int64_t>& batches, const std::vector<double>& values) {
  if (batches.size() == 1) return values.front() / static_cast<double>(batches.front());
  return (values.back() - values.front()) / static_cast<double>(batches.back() - batches.front());
}

const core::LayerSample* sample_at(const core::LayerProfile& layer, std::int64_t batch) {
  for (const auto& s : layer.samples) {
    if (s.batch == batch) return &s;
  }
  return nullptr;
}

const core::StepSample* step_at(const core::Trace& trace, std::int64_t batch) {
  for (const auto& s : trace.steps) {
    if (s.batch == batch) return &s;
  }
  return nullptr;
}

// The figures of a layer that the table compares, per sample, in one order for BASE and NEW.
struct LayerFigures {
  std::vector<double> memory;  // kept, output, fwd transient, bwd transient per sample; parameter bytes
  std::vector<double> time;    // fwd, bwd ms per sample at the largest common batch
};

const std::vector<std::string> kMemoryNames = {"kept bytes/sample", "output bytes/sample", "fwd transient bytes/sample",
                                               "bwd transient bytes/sample", "parameter bytes"};
const std::vector<std::string> kTimeNames = {"fwd ms/sample", "bwd ms/sample"};

LayerFigures figures(const core::LayerProfile& layer, const std::vector<std::int64_t>& batches) {
  std::vector<double> kept, output, fwd, bwd;
  for (const std::int64_t b : batches) {
    const core::LayerSample* s = sample_at(layer, b);
    kept.push_back(static_cast<double>(s->kept_bytes));
    output.push_back(static_cast<double>(s->output_bytes));
    fwd.push_back(static_cast<double>(s->fwd_transient_bytes));
    bwd.push_back(static_cast<double>(s->bwd_transient_bytes));
  }
  LayerFigures f;
  f.memory = {per_sample(batches, kept), per_sample(batches, output), per_sample(batches, fwd), per_sample(batches, bwd),
              static_cast<double>(layer.param_bytes)};
  const core::LayerSample* last = sample_at(layer, batches.back());
  const double b = static_cast<double>(batches.back());
  f.time = {static_cast<double>(last->fwd_ns) / 1e6 / b, static_cast<double>(last->bwd_ns) / 1e6 / b};
  return f;
}

std::string describe_choice(const core::StepChoice& choice) {
  const auto& micro = choice.micro_batches;
  char text[160];
  std::snprintf(text, sizeof text, "%zu x %lld%s, %zu ckpt, %d tempo", micro.size(), static_cast<long long>(micro.front()),
                micro.back() != micro.front() ? " (uneven)" : "", choice.checkpointed_blocks.size(), choice.tempo_count());
  // "all" uses L2L where nothing else fits: the plan is then a different kind of step.
  return std::string(text) + (choice.l2l ? ", l2l" : "");
}

// The largest batch whose whole step (one micro-batch, nothing applied) fits `budget`.
std::int64_t largest_batch_in_one_step(const core::Trace& trace, std::int64_t budget) {
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const auto fits = [&](std::int64_t b) {
    return planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({b})).peak_bytes <= budget;
  };
  if (!fits(1)) return 0;
  std::int64_t lo = 1, hi = core::kMaxTraceBatch;
  if (fits(hi)) return hi;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

struct Planned {
  std::string description = "infeasible";
  double samples_per_second = 0;
};

Planned plan_once(const core::Trace& trace, std::int64_t budget, std::int64_t batch) {
  planner::PlanRequest request;
  request.budget_bytes = budget;
  request.global_batch = batch;
  request.margin_fraction = 0;
  request.strategies = planner::parse_strategies("all");
  request.trace_path = "(compare)";
  request.trace_sha256 = std::string(64, '0');
  const auto outcome = planner::plan_step(trace, request);
  Planned out;
  if (outcome.plan) {
    out.description = describe_choice(outcome.plan->choice);
    out.samples_per_second = outcome.plan->predicted.samples_per_second;
  }
  return out;
}

std::string growth_failure(const std::string& where, const Change& c, double allowed) {
  char text[256];
  std::snprintf(text, sizeof text, "%s: %s %s (from %.6g to %.6g), more than the %.1f%% allowed", where.c_str(),
                c.what.c_str(), percent(c.fraction()).c_str(), c.base, c.next, 100 * allowed);
  return text;
}

// Different models or precisions still compare, but the reader is told what the differences are.
void warn_of_different_runs(const core::Trace& base, const core::Trace& next, TraceComparison& out) {
  if (base.model.name != next.model.name) {
    out.warnings.push_back("the traces profiled different models (" + base.model.name + " and " + next.model.name +
                           "): layers are matched by name");
  }
  if (base.precision != next.precision) {
    // A step in bf16 keeps other bytes and takes other times: the differences are the precision's.
    out.warnings.push_back("the traces measured the step in different precisions (" +
                           std::string(core::precision_name(base.precision)) + " and " +
                           std::string(core::precision_name(next.precision)) + ")");
  }
}

std::vector<std::int64_t> common_batches(const core::Trace& base, const core::Trace& next) {
  std::vector<std::int64_t> common;
  for (const std::int64_t b : base.batch_sizes) {
    if (std::find(next.batch_sizes.begin(), next.batch_sizes.end(), b) != next.batch_sizes.end()) {
      common.push_back(b);
    }
  }
  if (common.empty()) {
    throw core::InputError("the traces have no batch size in common (profile both with --batch-sizes including one)");
  }
  return common;
}

// Times compare only when measured on the same device in the same host-memory regime.
void decide_whether_times_compare(const core::Trace& base, const core::Trace& next, TraceComparison& out) {
  out.times_compared = base.device.kind == next.device.kind && base.device.name == next.device.name &&
                       base.host_memory_regime == next.host_memory_regime;
  if (base.device.kind != next.device.kind || base.device.name != next.device.name) {
    out.times_note = "times left out: the traces come from different devices (" + base.device.name + " and " +
                     next.device.name + ")";
  } else if (!out.times_compared) {
    out.times_note = "times left out: the traces were measured in different host-memory regimes (" +
                     base.host_memory_regime + " and " + next.host_memory_regime + ")";
  }
}

// A layer present in one trace only: its memory against nothing.
LayerComparison one_sided_layer(const std::string& name, const std::string& status, const LayerFigures& f, bool in_base) {
  LayerComparison c{name, status, {}, {}, {}};
  for (std::size_t k = 0; k < kMemoryNames.size(); ++k) {
    c.memory.push_back(in_base ? Change{kMemoryNames[k], f.memory[k], 0} : Change{kMemoryNames[k], 0, f.memory[k]});
  }
  return c;
}

LayerComparison matched_layer(const core::LayerProfile& base, const LayerFigures& bf, const core::LayerProfile& next,
                              const std::vector<std::int64_t>& batches, bool times_compared) {
  const LayerFigures nf = figures(next, batches);
  LayerComparison c{base.name, "same", {}, {}, {}};
  bool changed = false;
  for (std::size_t k = 0; k < kMemoryNames.size(); ++k) {
    c.memory.push_back({kMemoryNames[k], bf.memory[k], nf.memory[k]});
    changed |= bf.memory[k] != nf.memory[k];
  }
  if (times_compared) {
    for (std::size_t k = 0; k < kTimeNames.size(); ++k) c.time.push_back({kTimeNames[k], bf.time[k], nf.time[k]});
  }
  for (const std::int64_t b : batches) c.batches.push_back({b, *sample_at(base, b), *sample_at(next, b)});
  if (changed) c.status = "changed";
  return c;
}

// Layers matched by name: BASE's in order (changed, same or removed), then those only NEW has;
// then the largest memory change first. Also totals each trace's activations per sample.
void compare_layers(const core::Trace& base, const core::Trace& next, TraceComparison& out) {
  const auto& batches = out.common_batches;
  std::map<std::string, const core::LayerProfile*> next_by_name;
  for (const auto& layer : next.layers) next_by_name[layer.name] = &layer;
  std::map<std::string, bool> in_base;
  double base_activations = 0, next_activations = 0;
  for (const auto& layer : base.layers) {
    in_base[layer.name] = true;
    const LayerFigures bf = figures(layer, batches);
    base_activations += bf.memory[0];
    const auto it = next_by_name.find(layer.name);
    if (it == next_by_name.end()) {
      out.removed.push_back(layer.name);
      out.layers.push_back(one_sided_layer(layer.name, "removed", bf, true));
      continue;
    }
    out.layers.push_back(matched_layer(layer, bf, *it->second, batches, out.times_compared));
  }
  for (const auto& layer : next.layers) {
    const LayerFigures nf = figures(layer, batches);
    next_activations += nf.memory[0];
    if (in_base.count(layer.name) > 0) continue;
    out.added.push_back(layer.name);
    out.layers.push_back(one_sided_layer(layer.name, "added", nf, false));
  }
  // Largest memory change first; among equals (unchanged layers), execution order.
  std::stable_sort(out.layers.begin(), out.layers.end(), [](const LayerComparison& a, const LayerComparison& b) {
    return a.largest_memory_delta() > b.largest_memory_delta();
  });
  out.activations_per_sample = {"activations bytes/sample", base_activations, next_activations};
}

// The whole model's figures at the largest common batch.
void compare_totals(const core::Trace& base, const core::Trace& next, TraceComparison& out) {
  const std::int64_t largest = out.common_batches.back();
  out.parameters = {"parameter bytes", static_cast<double>(base.param_bytes()), static_cast<double>(next.param_bytes())};
  out.trainable_parameters = {"trainable parameter bytes", static_cast<double>(base.trainable_param_bytes()),
                              static_cast<double>(next.trainable_param_bytes())};
  const core::StepSample* base_step = step_at(base, largest);
  const core::StepSample* next_step = step_at(next, largest);
  out.static_bytes = {"static bytes", static_cast<double>(base_step->static_bytes), static_cast<double>(next_step->static_bytes)};
  out.step_peak = {"step peak bytes at batch " + std::to_string(largest), static_cast<double>(base_step->peak_bytes),
                   static_cast<double>(next_step->peak_bytes)};
  if (out.times_compared) {
    const double b = static_cast<double>(largest);
    out.step_time = {"step ms/sample at batch " + std::to_string(largest), static_cast<double>(base_step->plain_step_ns) / 1e6 / b,
                     static_cast<double>(next_step->plain_step_ns) / 1e6 / b};
  }
}

// What the planner makes of each trace under one budget and batch: by default BASE's peak at the
// largest common batch, so that BASE's batch fits.
void compare_plans_made(const core::Trace& base, const core::Trace& next, const CompareOptions& options,
                        TraceComparison& out) {
  const std::int64_t largest = out.common_batches.back();
  PlannedSummary& planned = out.planned;
  planned.batch = options.batch > 0 ? options.batch : largest;
  planned.budget_bytes = options.budget_bytes > 0 ? options.budget_bytes : step_at(base, largest)->peak_bytes;
  planned.largest_batch = {"largest batch in one step", static_cast<double>(largest_batch_in_one_step(base, planned.budget_bytes)),
                           static_cast<double>(largest_batch_in_one_step(next, planned.budget_bytes))};
  const Planned base_plan = plan_once(base, planned.budget_bytes, planned.batch);
  const Planned next_plan = plan_once(next, planned.budget_bytes, planned.batch);
  planned.base_plan = base_plan.description;
  planned.next_plan = next_plan.description;
  planned.samples_per_second = {"chosen plan samples/s", base_plan.samples_per_second, next_plan.samples_per_second};
}

// The first layer (largest change first) whose memory grew past the allowed growth names the
// failure; totals that grew with no single layer past it name the total.
void check_memory_growth(double allowed, TraceComparison& out) {
  for (const auto& layer : out.layers) {
    if (!out.failure.empty()) break;
    for (const auto& c : layer.memory) {
      if (c.delta() > 0 && c.fraction() > allowed) {
        out.failure = growth_failure("layer " + layer.name, c, allowed);
        break;
      }
    }
  }
  for (const Change* total : {&out.activations_per_sample, &out.parameters, &out.step_peak}) {
    if (out.failure.empty() && total->delta() > 0 && total->fraction() > allowed) {
      out.failure = growth_failure("the whole model", *total, allowed);
    }
  }
}

// A step slowed past the allowed fraction names the layer whose forward and backward grew the most,
// the one to look at.
void check_slowdown(double allowed, TraceComparison& out) {
  if (!out.times_compared) throw core::InputError("--max-slowdown: " + out.times_note);
  if (!out.failure.empty() || !(out.step_time.fraction() > allowed)) return;
  const LayerComparison* worst = nullptr;
  double worst_delta = 0;
  for (const auto& layer : out.layers) {
    double delta = 0;
    for (const auto& t : layer.time) delta += t.delta();
    if (worst == nullptr || delta > worst_delta) {
      worst = &layer;
      worst_delta = delta;
    }
  }
  out.failure = growth_failure("layer " + (worst != nullptr ? worst->name : std::string("?")) + " (slowed the most)",
                               out.step_time, allowed);
}

}  // namespace

TraceComparison compare_traces(const core::Trace& base, const core::Trace& next, const CompareOptions& options) {
  TraceComparison out;
  out.base_model = base.model.name;
  out.next_model = next.model.name;
  warn_of_different_runs(base, next, out);
  out.common_batches = common_batches(base, next);
  decide_whether_times_compare(base, next, out);
  compare_layers(base, next, out);
  compare_totals(base, next, out);
  compare_plans_made(base, next, options, out);
  check_memory_growth(options.thresholds.max_memory_growth, out);
  if (options.thresholds.max_slowdown) check_slowdown(*options.thresholds.max_slowdown, out);
  return out;
}

namespace {

std::string join_ints(const std::vector<int>& xs) {
  std::string s;
  for (const int x : xs) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s.empty() ? "none" : s;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& name : names) s += (s.empty() ? "" : ",") + name;
  return s.empty() ? "none" : s;
}

std::string tempo_layers(const core::StepChoice& choice) {
  std::vector<std::string> names;
  for (const auto& layer : choice.layers) {
    if (layer.variant != core::LayerVariant::Standard) names.push_back(layer.name);
  }
  return join_names(names);
}

std::string micro_batches(const std::vector<std::int64_t>& micro) {
  if (micro.empty()) return "none";
  return std::to_string(micro.size()) + " x " + std::to_string(micro.front()) +
         (micro.back() != micro.front() ? " (last " + std::to_string(micro.back()) + ")" : "");
}

void add_row(ChoiceComparison& out, const std::string& what, const std::string& base, const std::string& next) {
  out.rows.push_back({what, base, next, base != next});
}

void check(ChoiceComparison& out, const Thresholds& thresholds, const Change& peak, const Change& speed) {
  if (peak.delta() > 0 && peak.fraction() > thresholds.max_memory_growth) {
    out.failure = growth_failure("the " + out.kind, peak, thresholds.max_memory_growth);
  } else if (thresholds.max_slowdown && speed.base > 0 && speed.next > 0) {
    // A slowdown is the step time's growth: samples/s falling by 1/(1 + s) - 1.
    const Change step_time{"step time per sample (s)", 1 / speed.base, 1 / speed.next};
    if (step_time.fraction() > *thresholds.max_slowdown) {
      out.failure = growth_failure("the " + out.kind, step_time, *thresholds.max_slowdown);
    }
  }
}

}  // namespace

namespace {

// "1", "2, stage 1 (optimizer state sharded)", or at stage 3 "..., per block".
std::string workers_of(const core::StepChoice& choice) {
  if (!choice.data_parallel) return "1";
  const auto& dp = *choice.data_parallel;
  return std::to_string(choice.workers()) + ", " + core::shard_stage_name(dp.shard_stage) +
         (dp.shard_stage >= 3 ? ", per " + std::string(core::gather_unit_name(dp.gather)) : "");
}

}  // namespace

ChoiceComparison compare_plans(const core::Plan& base, const core::Plan& next, const Thresholds& thresholds) {
  ChoiceComparison out;
  out.kind = "plan";
  if (base.model != next.model) out.warnings.push_back("the plans are for different models (" + base.model + " and " + next.model + ")");
  if (base.precision != next.precision) {
    out.warnings.push_back("the plans run the step in different precisions (" + std::string(core::precision_name(base.precision)) +
                           " and " + std::string(core::precision_name(next.precision)) + ")");
  }
  add_row(out, "model", base.model, next.model);
  add_row(out, "device", base.device, next.device);
  add_row(out, "budget", core::format_bytes(base.budget_bytes), core::format_bytes(next.budget_bytes));
  add_row(out, "global batch", std::to_string(base.global_batch), std::to_string(next.global_batch));
  add_row(out, "micro-batches", micro_batches(base.choice.micro_batches), micro_batches(next.choice.micro_batches));
  add_row(out, "checkpointed blocks", join_ints(base.choice.checkpointed_blocks), join_ints(next.choice.checkpointed_blocks));
  add_row(out, "Tempo layers", tempo_layers(base.choice), tempo_layers(next.choice));
  add_row(out, "strategies", join_names(base.strategies), join_names(next.strategies));
  add_row(out, "workers", workers_of(base.choice), workers_of(next.choice));
  out.peak = {"predicted peak bytes", static_cast<double>(base.predicted.peak_bytes), static_cast<double>(next.predicted.peak_bytes)};
  out.samples_per_second = {"predicted samples/s", base.predicted.samples_per_second, next.predicted.samples_per_second};
  check(out, thresholds, out.peak, out.samples_per_second);
  return out;
}

ChoiceComparison compare_reports(const core::Report& base, const core::Report& next, const Thresholds& thresholds) {
  ChoiceComparison out;
  out.kind = "report";
  if (base.model != next.model) out.warnings.push_back("the reports are of different models (" + base.model + " and " + next.model + ")");
  if (base.precision != next.precision) {
    out.warnings.push_back("the reports ran the step in different precisions (" + std::string(core::precision_name(base.precision)) +
                           " and " + std::string(core::precision_name(next.precision)) + ")");
  }
  add_row(out, "model", base.model, next.model);
  add_row(out, "device", base.device_name, next.device_name);
  add_row(out, "status", base.status, next.status);
  add_row(out, "budget", base.budget_bytes > 0 ? core::format_bytes(base.budget_bytes) : "not enforced",
          next.budget_bytes > 0 ? core::format_bytes(next.budget_bytes) : "not enforced");
  add_row(out, "global batch", std::to_string(base.global_batch), std::to_string(next.global_batch));
  add_row(out, "micro-batches", micro_batches(base.micro_batches), micro_batches(next.micro_batches));
  add_row(out, "checkpointed blocks", join_ints(base.checkpointed_blocks), join_ints(next.checkpointed_blocks));
  add_row(out, "measured steps", std::to_string(base.steps), std::to_string(next.steps));
  out.peak = {"predicted peak bytes", static_cast<double>(base.predicted.peak_bytes), static_cast<double>(next.predicted.peak_bytes)};
  out.samples_per_second = {"predicted samples/s", base.predicted.samples_per_second, next.predicted.samples_per_second};
  out.measured_peak = Change{"measured peak bytes", static_cast<double>(base.measured.peak_bytes), static_cast<double>(next.measured.peak_bytes)};
  out.measured_samples_per_second =
      Change{"measured samples/s", base.measured.samples_per_second, next.measured.samples_per_second};
  // A report's thresholds apply to what was measured.
  check(out, thresholds, *out.measured_peak, *out.measured_samples_per_second);
  return out;
}

}  // namespace headroom::report
