#pragma once
// Runs a plan in real libtorch training and reports predicted against measured: peak memory
// (allocator reporting hook), step time and samples/s (median over measured steps), and the
// accumulated gradient against the full batch's.
#include <cstdint>
#include <functional>
#include <string>

#include "core/plan.h"
#include "core/report.h"
#include "core/trace.h"

namespace headroom::executor {

struct ExecuteOptions {
  int steps = 3;         // measured steps
  int warmup_steps = 1;  // unmeasured steps first (gradients and optimizer state get allocated)
  std::string device = "cpu";
  bool enforce_budget = true;  // on the CPU, refuse allocations past the plan's budget
  // On the CPU, the budget is this host's real memory limit: malloc's resident heap (free pages
  // included, which headroom's host-memory regime keeps for speed) is kept within it too, handing
  // free heap back after a step that grew it past the budget. Off, the heap is measured and reported.
  bool host_limit = false;
  bool gradient_check = true;
  std::string data = "synthetic";  // or "fashion-mnist" (the cnn model): real images, test accuracy reported
  bool batchnorm_eval = false;     // BatchNorm normalizes with running statistics (micro-batching exact)
  std::uint64_t seed = 0;
  // Intra-op CPU threads; 0: the plan's (the trace's, as profiled). More than this process may use
  // is refused: the step would not run as it was profiled.
  int threads = 0;
  // Data parallel: this process is worker `rank` of `workers` (c10d's rank and world size), which
  // find each other through `store` (executor/data_parallel.h); a plan for N workers needs N.
  int rank = 0;
  int workers = 1;
  std::string store;
  // Train with dropout off and afterwards run the same steps in one process on each step's full
  // batch, from the same initial weights: the report says how far the weights are apart.
  bool full_batch_reference = false;
  std::function<void(const std::string&)> on_progress;
};

// Throws InputError for a bad request (unknown device, CUDA absent, a trace the zoo cannot rebuild).
// Running out of memory is not thrown: the report's status says so, with where and how much.
core::Report execute(const core::Plan& plan, const core::Trace& trace, const std::string& plan_path,
                     const ExecuteOptions& options);

}  // namespace headroom::executor
