#pragma once
// A trace's times moved to another machine by the calibrations of both (core/calibration.h): each
// layer's by the class of work it is made of, measured per layer. Torch-free, so the plan command
// and the desktop app stay so; the machine at hand is timed by their callers.
#include <optional>
#include <string>
#include <string_view>

#include "core/calibration.h"
#include "core/plan.h"
#include "core/report.h"
#include "core/trace.h"

namespace headroom::core {

// The trace's times as they would be on the machine `ratio` leads to: each layer sample's by its
// own class mix, the steps' by their layers' (the optimizer's and zeroing's as memory-bound
// work); its calibration becomes `here`. Memory is left as it is. Needs the trace's calibration
// (throws std::logic_error without).
Trace rescaled(const Trace& trace, const SpeedRatio& ratio, const Calibration& here);

// A trace's times on the machine at hand (`here`, timed by the caller, which may have none): where
// its calibration and here's differ beyond their noise, a line that says so, and with `rescale` the
// trace rescaled to here. Torch-free, so the plan command stays so.
struct TimesHere {
  std::optional<Trace> rescaled;                 // set exactly where the times were rescaled
  std::optional<Calibration> calibration;        // the machine the times hold for
  std::string note;                              // one line for the user, or empty
};
TimesHere times_here(const Trace& trace, const std::optional<Calibration>& here, bool rescale);

// The trace's times as `plan_calibration` (a plan's: the machine its times hold for) says they were
// planned: rescaled to it where it is not the trace's own.
Trace times_as_planned(const Trace& trace, const std::optional<Calibration>& plan_calibration);

// A plan's step time by the class of work it scales with (core::Plan::predicted_parts, filled by
// the planner where the trace has a calibration): seconds a step that take `ratio.matmul` times as
// long where matrix products do, `ratio.compute` where other compute-bound work does, and
// `ratio.memory` where memory-bound work does.
inline constexpr std::string_view kMatmulBoundSecondsPart = "matmul_bound_seconds";
inline constexpr std::string_view kComputeBoundSecondsPart = "compute_bound_seconds";
inline constexpr std::string_view kMemoryBoundSecondsPart = "memory_bound_seconds";

// Layer kinds whose compute-bound work is a matrix product (linear, attention, a pooler, a
// contrastive loss's similarities); any other kind's moves with the calibration's compute mean.
bool is_matrix_product_kind(std::string_view kind);

// The plan's predicted step time on the machine `ratio` leads to from the machine its times hold
// for (speed_ratio(*plan.calibration, here)), from its time by class of work; none where the plan
// carries no such parts (made by an older headroom, or of a trace without a calibration).
std::optional<double> step_seconds_on(const Plan& plan, const SpeedRatio& ratio);

// A run's report with its prediction moved to the machine it ran on, where that machine (timed
// right before and right after the run: report.calibration_before/after) differs from the one the
// plan's times hold for beyond their noise: the prediction and the error rescaled, one warning that
// says so, and the machine it now holds for. Left as it is, with a warning, where the plan carries
// no time by class of work.
void predict_for_the_run(const Plan& plan, Report& report);

}  // namespace headroom::core
