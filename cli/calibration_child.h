#pragma once
// This machine timed for comparing with a trace, by a `headroom calibrate` child process.
#include <optional>

#include "core/trace.h"
#include "runtime/calibration_cache.h"

namespace headroom::cli {

// A calibration of this machine on `trace`'s kind of device at its threads (at most the cores
// this process may use): the cache's, or else measured by running `headroom calibrate` (which
// caches it where other processes left it the cores), as headroom-torch. A child, because the kernels must run in the thread-pool regime profile and execute
// run in (runtime/host_info.h), which a command that runs no torch work of its own does not start
// in: timed inside `plan`, the memory pass took half the bandwidth (docs/results.md, "Thread
// pools"). Nothing
// where the device is not here, and nothing with the reason where the child failed or other
// processes shared the CPU's cores while it ran.
runtime::MachineTiming calibration_from_child(const core::Trace& trace);

}  // namespace headroom::cli
