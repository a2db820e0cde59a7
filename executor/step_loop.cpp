#include "executor/step_loop.h"

#include <chrono>
#include <stdexcept>

#include <torch/cuda.h>

#include "runtime/budget_allocator.h"

namespace headroom::executor {

void progress(const ExecuteOptions& options, const std::string& what) {
  if (options.on_progress) options.on_progress(what);
}

std::uint64_t step_seed(const ExecuteOptions& options, int step, std::size_t m) {
  return options.seed + 7919 * static_cast<std::uint64_t>(step + 1) + m;
}

void synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

void run_steps(StepRunner& runner, const ExecuteOptions& options, torch::Device device, core::Report& report) {
  using Clock = std::chrono::steady_clock;
  const int total = options.warmup_steps + options.steps;
  for (int step = 0; step < total; ++step) {
    const bool measured = step >= options.warmup_steps;
    progress(options, measured ? "step " + std::to_string(step - options.warmup_steps + 1) + "/" + std::to_string(options.steps)
                               : "warm-up " + std::to_string(step + 1) + "/" + std::to_string(options.warmup_steps));
    runner.before_step(step, measured);
    synchronize(device);
    const auto start = Clock::now();
    const double measuring = runner.step(step, measured);
    synchronize(device);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count() - measuring;
    runner.after_step(step, measured, report);
    if (measured) report.step_seconds.push_back(seconds);
  }
}

namespace {

core::OutOfMemory describe_out_of_memory(const Position& position, std::int64_t baseline) {
  const runtime::Refusal& refusal = runtime::BudgetAllocator::last_refusal();
  core::OutOfMemory oom;
  oom.layer = position.layer;
  oom.phase = position.phase;
  oom.micro_batch = position.micro_batch;
  oom.requested_bytes = refusal.requested_bytes;
  oom.in_use_bytes = refusal.in_use_bytes - baseline;
  oom.budget_bytes = refusal.budget_bytes - baseline;
  if (refusal.requested_bytes == 0) {
    // Not the budget's refusal (none was recorded on this thread): the device itself ran out.
    oom.phase += " (the device ran out; no budget refusal was recorded)";
    oom.requested_bytes = oom.in_use_bytes = oom.budget_bytes = 0;
  }
  return oom;
}

}  // namespace

void reporting_out_of_memory(const std::function<void()>& run, const Position& position,
                             const std::function<std::int64_t()>& baseline, core::Report& report) {
  try {
    run();
    report.status = "ok";
  } catch (const c10::OutOfMemoryError&) {
    report.out_of_memory = describe_out_of_memory(position, baseline());
    report.status = "out_of_memory";
  } catch (const std::runtime_error& e) {
    // TorchScript's interpreter rethrows what an op threw as a plain error with the message inside:
    // the budget's refusal on this thread, or CUDA's own, is still running out of memory.
    const bool refused = runtime::BudgetAllocator::last_refusal().requested_bytes > 0;
    if (!refused && std::string(e.what()).find("CUDA out of memory") == std::string::npos) throw;
    report.out_of_memory = describe_out_of_memory(position, baseline());
    report.status = "out_of_memory";
  }
}

}  // namespace headroom::executor
