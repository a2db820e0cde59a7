#pragma once
// Facts about the machine a trace was recorded on.
#include <string>

#include "core/trace.h"

namespace headroom::runtime {

core::DeviceInfo cpu_device_info();
// The cores this process may run on (its affinity mask, which a container or taskset narrows).
int usable_cores();

// libgomp's worker threads spin for a while after each parallel region, on the cores OpenBLAS's own
// threads need for the matrix product that usually follows: bert mini at 2 intra-op threads took
// 2.4x as long a step as at 1 (0.44 s at batch 16 with passive workers, 1.13 s spinning). Passive
// workers sleep instead. libgomp reads OMP_WAIT_POLICY once, as it loads, so a command that runs
// torch work re-executes itself with it set to PASSIVE; where the user set it, nothing changes.
// Returns when the policy is set (or the re-execution failed, said on stderr).
void run_with_passive_openmp_workers(char** argv);
// "2026-11-22T01:46:49Z"
std::string utc_timestamp_now();

}  // namespace headroom::runtime
