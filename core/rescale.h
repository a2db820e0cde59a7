#pragma once
// A trace's times moved to another machine by the calibrations of both (core/calibration.h): each
// layer's by the class of work it is made of, measured per layer. Torch-free, so the plan command
// and the desktop app stay so; the machine at hand is timed by their callers.
#include <optional>
#include <string>

#include "core/calibration.h"
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

}  // namespace headroom::core
