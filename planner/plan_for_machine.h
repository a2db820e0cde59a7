#pragma once
// What a front end asks the planner for (`headroom plan`, the desktop app, the demo): the plan for a
// request on the machine at hand, with the warnings that machine calls for and every figure a run
// of the plan is later compared with, so that nothing after planning asks the planner again.
// Torch-free: the caller times the machine and reads its host memory.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/calibration.h"
#include "core/trace.h"
#include "planner/plan_search.h"

namespace headroom::planner {

// The machine a plan is made on, as its front end found it.
struct PlanningMachine {
  // The machine the trace's times hold for (core::TimesHere::calibration): the trace's own, or the
  // one at hand where they were rescaled to it; none where the trace has no calibration.
  std::optional<core::Calibration> calibration;
  std::string times_note;  // core::TimesHere::note: how the trace's machine compares with this one, or empty
  std::string regime;      // the host-memory regime headroom executes in here (core::headroom_regime())
  // Whether to add the plan's time by class of work (add_time_by_class: four more predictions of
  // the step, each on a rescaled copy of the trace, up to a few milliseconds on a large trace). The desktop app adds it when a plan leaves the app
  // (saved or run), not on every replan as the budget moves.
  bool time_by_class = true;
};

// plan_step for `request` (whose host_memory_bytes, where it allows L2L, is this machine's), the plan's warnings
// for a trace measured in another host-memory regime or on another machine, the calibration and
// threads its times hold for, and (unless the machine says otherwise) its step time by class of work
// (core::kComputeBoundSecondsPart, core::kMemoryBoundSecondsPart) so that `execute` moves the
// prediction to the machine it runs on without the planner.
PlanOutcome plan_for_machine(const core::Trace& trace, const PlanRequest& request, const PlanningMachine& machine);

// The plan's step time by class of work: the seconds that scale with the speed of matrix products,
// of other compute-bound work and of memory-bound work, from the plan's step
// predicted on the trace with each class's times doubled alone. Where the step's time is a sum of
// its ops, each layer's scaled by its own class mix, that is exact; where it takes the longer of
// two (L2L's lanes, an exposed all-reduce), the parts are scaled down to what doubling every class
// at once adds, so a uniformly faster or slower machine still moves it exactly. Adds nothing where
// the trace has no calibration.
void add_time_by_class(const core::Trace& trace, core::Plan& plan);

// One precision's plan for a request, or why there is none.
struct PrecisionPlan {
  core::Precision precision = core::Precision::Fp32;
  std::optional<core::Plan> plan;
  std::string why_not;
};
// `own`, the request's plan in the trace's precision, then the request planned in each of its
// other_precisions (each on the machine its own calibration says, as the trace's times were
// rescaled): what the user chooses between, since a precision changes the numerics.
std::vector<PrecisionPlan> plan_each_precision(const core::Trace& trace, const PlanRequest& request,
                                               const PlanningMachine& machine, const core::Plan& own);

}  // namespace headroom::planner
