#pragma once
// Planning for an optimizer the trace did not measure. A trace records one optimizer's state and
// step; for another (core/optimizer_spec.h: SGD with or without momentum, Adam, AdamW, amsgrad)
// the state is estimated from the trainable parameter count, so the planner, the CLI and the GUI agree on
// the same numbers and every such plan says they were estimated.
#include <string>

#include "core/trace.h"

namespace headroom::planner {

// Bytes of optimizer state per fp32 parameter element for the optimizers the profiler builds;
// throws InputError naming an unknown optimizer.
double optimizer_state_bytes_per_param(const std::string& optimizer);

// The trace as if it had been profiled with `optimizer`: its state from the parameter count, its
// temporaries no smaller than the measured optimizer's (Adam's update needs about two copies of the
// largest parameter tensor), its step time the measured one. The trace itself if it is the same.
core::Trace with_estimated_optimizer(const core::Trace& trace, const std::string& optimizer);

// The warning a plan made with an estimated optimizer carries.
std::string estimated_optimizer_warning(const core::Trace& trace, const std::string& optimizer);

}  // namespace headroom::planner
