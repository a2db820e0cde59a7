#pragma once
// What `headroom execute` says when a plan's peak missed its prediction at micro-batch sizes the
// trace did not profile: which sizes, and the command that profiles them into the trace.
// Torch-free: it reads the plan, its trace and the run's report.
#include <optional>
#include <string>

#include "core/plan.h"
#include "core/report.h"
#include "core/trace.h"

namespace headroom::core {

// A warning where the measured peak came out more than 1% under the prediction (between profiled
// sizes memory is a bound: a kernel's workspace need not be a line in the batch) or above it at all
// (a layer's scratch memory can step between profiled sizes where the line through them does not
// see it), and some micro-batch size lies between the profiled ones; nothing otherwise.
std::optional<std::string> unprofiled_sizes_warning(const Plan& plan, const Trace& trace, const Report& report);

}  // namespace headroom::core
