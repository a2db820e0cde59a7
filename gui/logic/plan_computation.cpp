#include "gui/logic/plan_computation.h"

#include <algorithm>
#include <chrono>

#include "core/errors.h"
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

MemoryTimeline memory_timeline(const core::Trace& trace, const core::Plan& plan, int max_bins) {
  const auto schedule = planner::plan_schedule(trace, plan, "plan");
  const simulator::Simulation sim = simulator::simulate(schedule);
  MemoryTimeline timeline;
  timeline.peak_bytes = sim.peak_bytes;
  timeline.peak_time_ms = static_cast<double>(sim.peak_time_ns) / 1e6;
  timeline.step_ms = static_cast<double>(sim.makespan_ns) / 1e6;
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

ThroughputCurve throughput_curve(const planner::PlanOutcome& outcome) {
  ThroughputCurve curve;
  for (const auto& split : outcome.splits) {
    curve.points.push_back({split.micro_batches.front(), static_cast<std::int64_t>(split.micro_batches.size()),
                            split.predicted.samples_per_second, split.predicted.peak_bytes, split.fits,
                            split.checkpointed_blocks});
  }
  std::sort(curve.points.begin(), curve.points.end(),
            [](const ThroughputPoint& a, const ThroughputPoint& b) { return a.micro_batch < b.micro_batch; });
  if (outcome.plan) {
    for (std::size_t i = 0; i < curve.points.size(); ++i) {
      if (curve.points[i].micro_batch == outcome.plan->micro_batches.front() &&
          curve.points[i].count == static_cast<std::int64_t>(outcome.plan->micro_batches.size())) {
        curve.chosen = static_cast<int>(i);
      }
    }
  }
  return curve;
}

PlanResult compute_plan(const TraceDocument& trace, const PlanInputs& inputs) {
  const auto start = std::chrono::steady_clock::now();
  PlanResult result;
  result.inputs = inputs;
  try {
    const planner::PlanOutcome outcome = planner::plan_step(trace.trace, plan_request(trace, inputs));
    result.throughput = throughput_curve(outcome);
    if (outcome.plan) {
      result.plan = outcome.plan;
      result.timeline = memory_timeline(trace.trace, *outcome.plan);
      result.summary = report::render_plan_summary(*outcome.plan);
    } else {
      result.infeasible_reason = outcome.reason;
      result.smallest_budget = outcome.smallest_budget;
      result.summary = "infeasible: " + outcome.reason + "\n";
    }
  } catch (const core::InputError& e) {
    result.error = e.what();
    result.summary = std::string("cannot plan: ") + e.what() + "\n";
  }
  result.compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace headroom::gui
