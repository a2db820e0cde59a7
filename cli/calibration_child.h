#pragma once
// This machine timed for comparing with a trace, by a `headroom calibrate` child process.
#include <optional>

#include "core/trace.h"

namespace headroom::cli {

// A calibration of this machine on `trace`'s kind of device at its threads (at most the cores
// this process may use): the cache's, or else measured by running `headroom calibrate` (which
// caches it), as headroom-torch. A child, because the kernels must run in the thread-pool regime profile and execute
// run in (runtime/host_info.h), which a command that runs no torch work of its own does not start
// in: timed inside `plan`, the memory pass took half the bandwidth (36 against 74 GB/s). Nothing
// where the device is not here or the child failed (said in a warning on stderr).
std::optional<core::Calibration> calibration_from_child(const core::Trace& trace);

}  // namespace headroom::cli
