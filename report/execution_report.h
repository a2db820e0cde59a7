#pragma once
// What `headroom execute` prints: predicted against measured, the gradient check, and where a run
// ran out of memory.
#include <string>

#include "core/report.h"

namespace headroom::report {

// The predicted and measured peak, step time and samples/s with their relative errors, the
// gradient check, test accuracy and warnings; for a run that ran out of memory, where it did.
std::string render_report(const core::Report& report);
// One line: the budget, the phase, layer and micro-batch, and the bytes requested and in use.
std::string describe_out_of_memory(const core::OutOfMemory& out_of_memory);

}  // namespace headroom::report
