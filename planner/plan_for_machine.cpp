#include "planner/plan_for_machine.h"

#include <algorithm>

#include "core/cost_model.h"
#include "core/host_memory.h"
#include "core/rescale.h"
#include "planner/layer_graph.h"
#include "planner/optimizer_estimate.h"
#include "planner/step_sequence.h"

namespace headroom::planner {

void add_time_by_class(const core::Trace& trace, core::Plan& plan) {
  if (!trace.calibration) return;
  const auto step_seconds = [&](const core::Trace& timed) {
    const core::Trace planned = plan.optimizer.empty() ? timed : with_estimated_optimizer(timed, plan.optimizer);
    return static_cast<double>(predict_step(core::CostModel(planned), LayerGraph(planned), plan.choice).step_ns) / 1e9;
  };
  const double as_planned = step_seconds(trace);
  const auto doubled = [&](double compute, double memory) {
    return step_seconds(core::rescaled(trace, {compute, memory, true}, *trace.calibration)) - as_planned;
  };
  plan.predicted_parts[std::string(core::kComputeBoundSecondsPart)] = std::max(doubled(2, 1), 0.0);
  plan.predicted_parts[std::string(core::kMemoryBoundSecondsPart)] = std::max(doubled(1, 2), 0.0);
}

PlanOutcome plan_for_machine(const core::Trace& trace, PlanRequest request, const PlanningMachine& machine) {
  if (request.strategies.contains(Strategy::L2L)) request.host_memory_bytes = machine.host_memory_bytes;
  PlanOutcome outcome = plan_step(trace, request);
  if (!outcome.plan) return outcome;
  core::Plan& plan = *outcome.plan;
  // The plan's times are the trace's: measured in another host-memory regime they may not hold
  // where headroom executes it.
  if (const std::string warning = core::regime_mismatch_warning(trace.host_memory_regime, machine.regime); !warning.empty()) {
    plan.warnings.push_back(warning);
  }
  if (!machine.times_note.empty()) plan.warnings.push_back(machine.times_note);
  plan.calibration = machine.calibration;
  plan.threads = std::max(trace.profile.threads, 1);
  add_time_by_class(trace, plan);
  return outcome;
}

}  // namespace headroom::planner
