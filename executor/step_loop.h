#pragma once
// The loop every planned step runs under, whatever runs the step: the plain step (micro-batches
// accumulating, a contrastive model's gradient cache, data parallel's exchange and ring joined to
// either; executor.cpp) or L2L (l2l_execute.cpp). One warm-up and measured-step loop, one
// progress, one clock, one account of where the memory ran out.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <torch/types.h>

#include "core/report.h"
#include "executor/executor.h"
#include "executor/plan_runner.h"

namespace headroom::executor {

// One planned step as it runs, chosen once from the plan's choice.
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // Off the clock, before step `step` (0-based, warm-up included): what the runner makes ahead of
  // a step (L2L's data) and the peaks reset.
  virtual void before_step(int step, bool measured) = 0;
  // One optimizer step, on the clock. Returns the seconds it spent measuring (host memory), which
  // the step's time leaves out.
  virtual double step(int step, bool measured) = 0;
  // Off the clock, after the step: what it measured, into `report` where `measured`.
  virtual void after_step(int step, bool measured, core::Report& report) = 0;
};

void progress(const ExecuteOptions& options, const std::string& what);
// The seed of micro-batch m's data in step `step`: the same on every worker, in L2L and in the
// full-batch reference.
std::uint64_t step_seed(const ExecuteOptions& options, int step, std::size_t m);
// Waits for the device's queued work (nothing to wait for on the CPU).
void synchronize(torch::Device device);

// options.warmup_steps, then options.steps measured ones, each timed between synchronizations; the
// measured steps' times go into report.step_seconds.
void run_steps(StepRunner& runner, const ExecuteOptions& options, torch::Device device, core::Report& report);

// Runs `run`; where it runs out of memory (the budget's refusal, or the device's own), the report
// says where (`position`) and how much, counted from `baseline()` bytes, with status
// "out_of_memory" instead of the exception; "ok" where it returns.
void reporting_out_of_memory(const std::function<void()>& run, const Position& position,
                             const std::function<std::int64_t()>& baseline, core::Report& report);

}  // namespace headroom::executor
