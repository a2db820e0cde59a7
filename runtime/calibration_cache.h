#pragma once
// This machine's calibrations (core/calibration.h), kept for a while per device and threads so that
// commands run one after another (a sweep of budgets) pay for them once. Torch-free: the commands
// that only read them (plan, simulate) do not load libtorch.
#include <filesystem>
#include <optional>
#include <string>

#include "core/calibration.h"

namespace headroom::runtime {

// The cache's answer for this machine's CPU (or its first CUDA device) at `threads`, if one no
// older than `max_age_s` is kept; and keeping one (quietly not, where the cache cannot be written).
std::optional<core::Calibration> read_cached_calibration(bool cuda, int threads, int max_age_s = 3600);
void save_cached_calibration(const core::Calibration& c);

// Where the cache is kept; empty where there is no home to keep it in.
std::filesystem::path calibration_cache_directory();

// This machine timed for comparing a trace with, or why it was not. A timing taken while other
// processes shared the cores is neither kept nor compared: it is not the machine's speed (one taken
// beside another job read half of it, and the plans made after it rescaled their traces to that).
struct MachineTiming {
  std::optional<core::Calibration> calibration;
  std::string why_not;  // where there is none: why; empty where the trace's device is not here
};

}  // namespace headroom::runtime
