#pragma once
// Facts about the machine a trace was recorded on.
#include <chrono>
#include <string>

#include "core/trace.h"

namespace headroom::runtime {

core::DeviceInfo cpu_device_info();
// The cores this process may run on (its affinity mask, which a container or taskset narrows).
int usable_cores();

// Whether this CPU computes bfloat16 natively: oneDNN's bfloat16 kernels need avx512_bf16 (or AMX),
// from /proc/cpuinfo's flags, within the instruction set DNNL_MAX_CPU_ISA lets oneDNN use.
bool cpu_has_native_bf16();

// What the cores this process may use have done since boot, from /proc/stat and getrusage.
struct CpuUsage {
  double wall_s = 0;
  double busy_s = 0;  // summed over the cores, this process included
  double own_s = 0;   // this process's threads, user and system
  bool known = false; // false where /proc/stat could not be read
};
CpuUsage cpu_usage_now();
// The cores other processes kept busy between two readings, on average; 0 where either is unknown.
// HEADROOM_OTHER_CORES_BUSY, where set to a number, is taken instead of the readings: a test of what
// a busy or a quiet machine makes of a timing sets the one it needs rather than hoping for it.
inline constexpr const char* kAssumedOthersVariable = "HEADROOM_OTHER_CORES_BUSY";
double cores_busy_with_others(const CpuUsage& before, const CpuUsage& after);

// The cores this process may use less those other processes keep busy, measured over `window`;
// at least 1. A thread on a core another process keeps busy makes every parallel region wait for
// it (docs/results.md, "Threads beside a busy core").
struct IdleCores {
  int usable = 1;
  int idle = 1;
  double busy_with_others = 0;  // cores, on average over the window
};
IdleCores measure_idle_cores(std::chrono::milliseconds window = std::chrono::milliseconds(300));
// The whole cores `busy_with_others` (an average) takes: one for each that other work keeps busy
// more than half the time.
int cores_taken(double busy_with_others);
// Why work at `threads` threads timed between two readings of this CPU's cores is not the machine's
// own speed ("other processes kept 1.2 cores busy on average"): other processes took whole cores
// (cores_taken) out of those it needed, leaving fewer idle than `threads`. Empty otherwise (a busy
// daemon on a 64-core host does not share a 2-thread timing's cores).
inline constexpr const char* kSharedWithOthers = "other processes kept ";
std::string shared_with_others(const CpuUsage& before, const CpuUsage& after, int threads);

// Two thread pools share the cores in a step: libgomp's (PyTorch's own kernels, oneDNN's
// convolutions) and OpenBLAS's (the matrix products). Each spins for a while after its work, on the
// cores the other needs next: libgomp's spinning made a step at 2 intra-op threads longer than at 1.
// OpenBLAS's workers spin 2^28 cycles after a matrix product, which slowed the convolutions that
// followed and made the calibration's convolution bimodal between commands. Without the spin (2^4
// cycles, OpenBLAS's least) the convolution read steady, and whole steps ran as fast as with it. A
// spin of 2^20 cycles kept the calibration steady but not the small convolutions right after the
// cnn's head (docs/results.md, "Thread pools"). Both libraries read their setting once, as they load: `headroom` sets
// OMP_WAIT_POLICY=PASSIVE and OPENBLAS_THREAD_TIMEOUT=4 before it starts headroom-torch, and a
// process that runs torch work started otherwise (headroom-torch by hand, a test binary)
// re-executes itself with them; a setting the user made is kept. Returns when both are set (or the
// re-execution failed, said on stderr).
void run_with_passive_thread_pools(char** argv);
// Sets the two variables where unset, for a process about to start another that runs torch work;
// true where it set either.
bool set_passive_thread_pools();
// "2026-11-22T01:46:49Z"
std::string utc_timestamp_now();

}  // namespace headroom::runtime
