#pragma once
// Times the calibration's kernels (core/calibration.h) on this machine with libtorch, at the
// threads libtorch runs with now, and keeps the answer for a while per machine and threads so that
// commands run one after another (a sweep of budgets) pay for it once.
#include <c10/core/Device.h>

#include <filesystem>
#include <optional>
#include <string>

#include "core/calibration.h"
#include "runtime/calibration_cache.h"
#include "core/trace.h"

namespace headroom::runtime {

// One run of the three kernels on `device`: about 0.5 s.
core::CalibrationRun time_calibration_kernels(c10::Device device);

// `runs` runs (at least one), with the device's name and the threads.
core::Calibration calibrate(c10::Device device, int runs = 3);

// `calibrate`, kept in the cache for the commands that follow unless other processes kept busy the
// cores its threads needed while it ran (then `shared` says so, host_info.h: not the machine's speed).
struct KeptCalibration {
  core::Calibration calibration;
  std::string shared;  // empty where it was kept
};
KeptCalibration calibrate_and_keep(c10::Device device);

// A calibration of this machine at the current threads no older than `max_age_s`, from the cache
// ($XDG_CACHE_HOME/headroom, else ~/.cache/headroom), or else measured now (in this process, in
// whatever thread-pool regime it runs) and cached; none, with the reason, where other processes
// shared the CPU's cores while it was measured. A cache that cannot be read or written is measured
// around, never an error.
MachineTiming cached_calibration(c10::Device device, int max_age_s = 3600);

}  // namespace headroom::runtime
