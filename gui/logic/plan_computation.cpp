#include "gui/logic/plan_computation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/cost_model.h"
#include "core/errors.h"
#include "core/host_memory.h"
#include "core/units.h"
#include "planner/optimizer_estimate.h"
#include "planner/plan_schedule.h"
#include "report/plan_report.h"
#include "simulator/simulator.h"

namespace headroom::gui {

planner::PlanRequest plan_request(const TraceDocument& trace, const PlanInputs& inputs) {
  planner::PlanRequest request;
  request.budget_bytes = inputs.budget_bytes;
  request.global_batch = inputs.global_batch;
  request.margin_fraction = inputs.margin_fraction;
  request.strategies = inputs.strategies;
  request.trace_path = trace.path;
  request.trace_sha256 = trace.sha256;
  request.optimizer = inputs.optimizer;
  return request;
}

std::string MemoryTimeline::describe(const TaskSpan& task) const {
  const std::string& category = categories.at(task.category);
  if (category == "optimizer") return "optimizer step";
  std::string what = category;
  if (task.layer >= 0 && static_cast<std::size_t>(task.layer) < layer_names.size()) {
    what += " of " + layer_names[static_cast<std::size_t>(task.layer)];
  }
  if (task.micro_batch >= 0 && micro_batches > 1) {
    what += " (micro-batch " + std::to_string(task.micro_batch + 1) + " of " + std::to_string(micro_batches) + ")";
  }
  return what;
}

MemoryTimeline memory_timeline(const core::Trace& trace, const core::Plan& plan, int max_bins) {
  const auto schedule = planner::plan_schedule(trace, plan, "plan");
  const simulator::Simulation sim = simulator::simulate(schedule);
  MemoryTimeline timeline;
  timeline.peak_bytes = sim.peak_bytes;
  timeline.peak_time_ms = static_cast<double>(sim.peak_time_ns) / 1e6;
  timeline.step_ms = static_cast<double>(sim.makespan_ns) / 1e6;
  timeline.micro_batches = plan.choice.micro_batches.size();
  for (const auto& layer : trace.layers) timeline.layer_names.push_back(layer.name);
  // The compute stream runs its tasks one at a time in schedule order, so they are in time order.
  for (std::size_t i = 0; i < schedule.tasks.size() && i < sim.tasks.size(); ++i) {
    const core::Task& task = schedule.tasks[i];
    if (task.stream != core::Stream::Compute) continue;
    auto category = std::find(timeline.categories.begin(), timeline.categories.end(), task.category);
    if (category == timeline.categories.end()) category = timeline.categories.insert(category, task.category);
    timeline.tasks.push_back({static_cast<double>(sim.tasks[i].start_ns) / 1e6,
                              static_cast<double>(sim.tasks[i].end_ns) / 1e6, task.layer, task.micro_batch,
                              static_cast<std::size_t>(category - timeline.categories.begin())});
  }
  const std::int64_t span = std::max<std::int64_t>(sim.makespan_ns, 1);
  // Per time bin, the sample with the highest total; the last sample of the step is kept too, so
  // the timeline ends where the step does.
  int current_bin = -1;
  for (const auto& sample : sim.memory) {
    const int bin = static_cast<int>(std::min<std::int64_t>(max_bins - 1, sample.time_ns * max_bins / span));
    const double t = static_cast<double>(sample.time_ns) / 1e6;
    if (bin != current_bin || timeline.bytes.empty()) {
      timeline.time_ms.push_back(t);
      timeline.bytes.push_back(sample.bytes);
      current_bin = bin;
    } else if (sample.total() > simulator::MemorySample{0, timeline.bytes.back()}.total()) {
      timeline.time_ms.back() = t;
      timeline.bytes.back() = sample.bytes;
    }
  }
  if (!sim.memory.empty() && timeline.time_ms.back() != static_cast<double>(sim.memory.back().time_ns) / 1e6) {
    timeline.time_ms.push_back(static_cast<double>(sim.memory.back().time_ns) / 1e6);
    timeline.bytes.push_back(sim.memory.back().bytes);
  }
  return timeline;
}

std::string memory_hover_text(const MemoryTimeline& timeline, double time_ms) {
  if (timeline.time_ms.empty() || time_ms < 0 || time_ms > timeline.step_ms) return {};
  // Memory holds from one sample to the next: the sample in force is the last one not after time_ms.
  const auto after = std::upper_bound(timeline.time_ms.begin(), timeline.time_ms.end(), time_ms);
  const std::size_t at = after == timeline.time_ms.begin() ? 0 : static_cast<std::size_t>(after - timeline.time_ms.begin()) - 1;
  char head[64];
  std::snprintf(head, sizeof head, "%.4g ms into the step", time_ms);
  std::string text = head;
  for (const TaskSpan& task : timeline.tasks) {
    if (task.start_ms <= time_ms && time_ms < task.end_ms) {
      text += "\n" + timeline.describe(task);
      break;
    }
  }
  std::int64_t total = 0;
  static constexpr std::array<const char*, core::kMemoryKinds> kKinds{"parameters", "gradients", "optimizer state",
                                                                      "input",      "activations", "transient"};
  for (std::size_t k = 0; k < core::kMemoryKinds; ++k) {
    const std::int64_t bytes = timeline.bytes[at][k];
    total += bytes;
    if (bytes != 0) text += "\n" + std::string(kKinds[k]) + ": " + core::format_bytes(bytes);
  }
  text += "\ntotal: " + core::format_bytes(total);
  if (total == timeline.peak_bytes) text += " (the peak)";
  return text;
}

std::string throughput_hover_text(const ThroughputPoint& point) {
  char line[160];
  std::string text;
  std::snprintf(line, sizeof line, "micro-batch %lld%s", static_cast<long long>(point.micro_batch),
                point.count > 1 ? (" (" + std::to_string(point.count) + " micro-batches)").c_str() : " (the whole batch)");
  text += line;
  text += "\npeak " + core::format_bytes(point.peak_bytes) + (point.fits ? ", fits the budget" : ", over the budget");
  std::snprintf(line, sizeof line, "\n%.4g s/step, %.4g samples/s", point.step_seconds, point.samples_per_second);
  text += line;
  text += "\n" + std::to_string(point.checkpointed_blocks) + " checkpointed block" +
          (point.checkpointed_blocks == 1 ? "" : "s") + ", " + std::to_string(point.lean_layers) + " lean layer" +
          (point.lean_layers == 1 ? "" : "s");
  if (!point.fits) text += "\n(without checkpointing or lean layers: nothing made it fit)";
  return text;
}

std::int64_t allowed_bytes(std::int64_t budget_bytes, double margin_fraction) {
  // As the planner rounds its margin: up, so the allowed bytes are never more than it allows.
  return budget_bytes - static_cast<std::int64_t>(std::ceil(static_cast<double>(budget_bytes) * margin_fraction));
}

ThroughputCurve throughput_curve(const planner::PlanOutcome& outcome) {
  ThroughputCurve curve;
  for (const auto& split : outcome.splits) {
    curve.points.push_back({split.micro_batches.front(), static_cast<std::int64_t>(split.micro_batches.size()),
                            split.predicted.samples_per_second, split.predicted.peak_bytes, split.fits,
                            split.checkpointed_blocks, split.lean_layers, split.predicted.step_seconds});
  }
  std::sort(curve.points.begin(), curve.points.end(),
            [](const ThroughputPoint& a, const ThroughputPoint& b) { return a.micro_batch < b.micro_batch; });
  if (outcome.plan) {
    for (std::size_t i = 0; i < curve.points.size(); ++i) {
      if (curve.points[i].micro_batch == outcome.plan->choice.micro_batches.front() &&
          curve.points[i].count == static_cast<std::int64_t>(outcome.plan->choice.micro_batches.size())) {
        curve.chosen = static_cast<int>(i);
      }
    }
  }
  return curve;
}

namespace {

// The planner names its request's fields; the window names its own controls.
std::string in_window_words(std::string message) {
  static const std::pair<std::string_view, std::string_view> kControls[] = {
      {"global_batch: ", "Global batch: "}, {"budget_bytes: ", "Budget: "},
      {"margin_fraction: ", "Margin: "}, {"strategies: ", "Strategies: "}};
  for (const auto& [field, control] : kControls) {
    if (message.starts_with(field)) return std::string(control) + message.substr(field.size());
  }
  return message;
}

}  // namespace

PlanResult compute_plan(const TraceDocument& trace, const PlanInputs& inputs) {
  const auto start = std::chrono::steady_clock::now();
  PlanResult result;
  result.inputs = inputs;
  try {
    const planner::PlanOutcome outcome = planner::plan_step(trace.trace, plan_request(trace, inputs));
    result.throughput = throughput_curve(outcome);
    if (outcome.plan) {
      result.plan = outcome.plan;
      // As headroom plan warns: the trace's times may not hold where headroom executes the plan.
      if (const std::string warning = core::regime_mismatch_warning(trace.trace.host_memory_regime, core::headroom_regime());
          !warning.empty()) {
        result.plan->warnings.push_back(warning);
      }
      result.timeline = memory_timeline(trace.trace, *outcome.plan);
      result.summary = report::render_plan_summary(*result.plan);
    } else {
      result.infeasible_reason = outcome.reason;
      result.smallest_budget = outcome.smallest_budget;
      result.summary = "infeasible: " + outcome.reason + "\n";
      const bool other_optimizer = !inputs.optimizer.empty() && inputs.optimizer != trace.trace.optimizer.name;
      result.floor_bytes =
          core::CostModel(other_optimizer ? planner::with_estimated_optimizer(trace.trace, inputs.optimizer) : trace.trace)
              .static_bytes();
      if (outcome.smallest_budget > 0) {
        planner::PlanRequest least = plan_request(trace, inputs);
        least.budget_bytes = outcome.smallest_budget;
        const planner::PlanOutcome attempt = planner::plan_step(trace.trace, least);
        if (attempt.plan) {
          result.best_attempt = attempt.plan;
          result.timeline = memory_timeline(trace.trace, *attempt.plan);
        }
      }
    }
  } catch (const core::InputError& e) {
    result.error = in_window_words(e.what());
    result.summary = "cannot plan: " + result.error + "\n";
  }
  result.compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace headroom::gui
