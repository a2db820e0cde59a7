#include "planner/plan_for_machine.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>
#include <optional>

#include "core/cost_model.h"
#include "core/errors.h"
#include "core/host_memory.h"
#include "core/rescale.h"
#include "planner/layer_graph.h"
#include "planner/optimizer_estimate.h"
#include "planner/step_sequence.h"

namespace headroom::planner {

void add_time_by_class(const core::Trace& trace, core::Plan& plan) {
  if (!trace.calibration) return;
  // The plan's step as the search predicted it, on the trace it planned on (with the other
  // optimizer's estimated state where the plan names one); the graph holds no times, so one serves.
  std::optional<core::Trace> estimated;
  if (!plan.optimizer.empty()) estimated = with_estimated_optimizer(trace, plan.optimizer);
  const core::Trace& planned = estimated ? *estimated : trace;
  const LayerGraph graph(planned);
  const double as_planned = plan.predicted.step_seconds;
  // Each class twice as slow alone: its seconds are what the step then takes longer.
  const auto slower = [&](double matmul, double compute, double memory) {
    core::SpeedRatio ratio;
    ratio.compute = compute;
    ratio.memory = memory;
    ratio.differs = true;
    ratio.matmul = matmul;
    const core::Trace there = core::rescaled(planned, ratio, *trace.calibration);
    const double seconds = static_cast<double>(predict_step(core::CostModel(there), graph, plan.choice).step_ns) / 1e9;
    return std::max(seconds - as_planned, 0.0);
  };
  const std::array<std::pair<std::string_view, double>, 3> parts = {{{core::kMatmulBoundSecondsPart, slower(2, 1, 1)},
                                                                      {core::kComputeBoundSecondsPart, slower(1, 2, 1)},
                                                                      {core::kMemoryBoundSecondsPart, slower(1, 1, 2)}}};
  // Where lanes overlap (L2L's step is its longest lane) each class alone may lengthen the step by
  // more than its share: scaled so that they add up to what every class twice as slow adds, so a
  // machine uniformly faster or slower moves the step exactly.
  double sum = 0;
  for (const auto& [name, seconds] : parts) sum += seconds;
  const double all = slower(2, 2, 2);
  const double scale = sum > all && sum > 0 ? all / sum : 1.0;
  for (const auto& [name, seconds] : parts) plan.predicted_parts[std::string(name)] = seconds * scale;
}

PlanOutcome plan_for_machine(const core::Trace& trace, const PlanRequest& request, const PlanningMachine& machine) {
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
  if (machine.time_by_class) add_time_by_class(trace, plan);
  return outcome;
}

std::vector<PrecisionPlan> plan_each_precision(const core::Trace& trace, const PlanRequest& request,
                                               const PlanningMachine& machine, const core::Plan& own) {
  std::vector<PrecisionPlan> out{{trace.precision, own, ""}};
  for (const core::Trace& other : trace.other_precisions) {
    PlanningMachine at = machine;
    at.calibration = other.calibration;
    at.times_note.clear();
    at.time_by_class = false;  // a comparison: the chosen plan carries its own
    PrecisionPlan row;
    row.precision = other.precision;
    try {
      PlanOutcome outcome = plan_for_machine(other, request, at);
      if (outcome.plan) {
        row.plan = std::move(outcome.plan);
      } else {
        row.why_not = outcome.reason;
      }
    } catch (const core::InputError& e) {
      row.why_not = e.what();
    }
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace headroom::planner
