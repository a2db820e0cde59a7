#pragma once
// Micro-batch sizes a plan runs that its trace did not profile. Between two profiled sizes memory is
// a bound (a kernel's scratch can step anywhere between them), so a plan says how far its bound
// lies above the line through the sizes around it, and `headroom execute` says so when a plan's peak
// missed its prediction there: which sizes, and the command that profiles them into the trace.
// Torch-free: it reads the plan, its trace and the run's report.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/report.h"
#include "core/trace.h"

namespace headroom::core {

// The sizes among `micro_batches` that lie between the trace's profiled sizes (above its smallest,
// below its largest and not one of them), ascending, each once.
std::vector<std::int64_t> sizes_between_profiled(const std::vector<std::int64_t>& micro_batches, const Trace& trace);

// A plan's note where its micro-batches lie between the profiled sizes (and none past the largest,
// which plan_warnings names) and its predicted peak, a bound there, is more than 1% above
// `line_peak_bytes`, the same step's peak with every byte count on the line through the profiled
// sizes around it (CostModel::Between::Line); nothing otherwise.
std::optional<std::string> bound_between_sizes_note(const Plan& plan, const Trace& trace, std::int64_t line_peak_bytes);

// A warning where the measured peak came out more than 1% under the prediction (between profiled
// sizes memory is a bound: a kernel's workspace need not be a line in the batch) or above it at all
// (a layer's scratch memory can step between profiled sizes where the line through them does not
// see it), and some micro-batch size lies between the profiled ones; nothing otherwise.
std::optional<std::string> unprofiled_sizes_warning(const Plan& plan, const Trace& trace, const Report& report);

}  // namespace headroom::core
