#pragma once
// The machine timed around a run (core/calibration.h): right before the warm-up, once the plan and
// options have been checked and the model built, so a refused run prints nothing else; outside the
// run's budget, its arrays handed back to the system before the first step.
#include <torch/types.h>

#include <optional>

#include "core/host_memory.h"
#include "core/report.h"
#include "executor/executor.h"
#include "runtime/budget_allocator.h"
#include "runtime/calibration.h"

namespace headroom::executor {

inline void time_machine_before_run(const ExecuteOptions& options, torch::Device device,
                                    std::optional<runtime::ScopedBudget>& budget, core::Report& report) {
  if (options.on_progress) options.on_progress("calibration before");
  if (budget) budget->suspend();
  report.calibration_before = runtime::calibrate(device, 1);
  if (budget) budget->resume();
  (void)core::release_free_host_memory();
}

}  // namespace headroom::executor
