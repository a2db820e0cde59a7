#include "runtime/calibration.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>

#include "core/atomic_file.h"
#include "core/host_memory.h"
#include "core/json_reader.h"
#include "core/statistics.h"
#include "runtime/host_info.h"

namespace headroom::runtime {

namespace {

using Clock = std::chrono::steady_clock;

// Each kernel's timing, after its warm-up: a run of the three takes about 0.5 s.
constexpr double kKernelSeconds = 0.1;

// The median time of one call of `work`, called for about `budget_s` (at least five times) after
// calls that wake the threads and warm the caches and allocator for half of that: one call is
// milliseconds, and a single one's time on a shared 2-core machine is noise.
double median_seconds(c10::Device device, double budget_s, const std::function<void()>& work) {
  const auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  const auto warm_until = Clock::now() + std::chrono::duration<double>(budget_s / 2);
  do {
    work();
    sync();
  } while (Clock::now() < warm_until);
  std::vector<double> times;
  const auto until = Clock::now() + std::chrono::duration<double>(budget_s);
  while (times.size() < 5 || Clock::now() < until) {
    const auto start = Clock::now();
    work();
    sync();
    times.push_back(std::max(std::chrono::duration<double>(Clock::now() - start).count(), 1e-9));
  }
  return core::median(std::move(times));
}

// The name a calibration of `device` carries: the CPU's as traces name it.
std::string device_name(c10::Device device) {
  return device.is_cuda() ? "cuda:" + std::to_string(device.index()) : cpu_device_info().name;
}

}  // namespace

core::CalibrationRun time_calibration_kernels(c10::Device device) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  core::CalibrationRun run;
  // A CPU's linear layers at their sizes: a product big enough for every thread, small enough to time often.
  const std::int64_t n = device.is_cuda() ? 4096 : 1024;
  {
    const torch::Tensor a = torch::rand({n, n}, options), b = torch::rand({n, n}, options);
    torch::Tensor c = torch::empty({n, n}, options);
    const double s = median_seconds(device, kKernelSeconds, [&] { torch::mm_out(c, a, b); });
    run.matmul_flops_per_s = 2.0 * static_cast<double>(n * n * n) / s;
  }
  {
    // A ResNet stage's 3x3 convolution.
    const std::int64_t batch = device.is_cuda() ? 64 : 16, channels = 64, side = 32;
    const torch::Tensor x = torch::rand({batch, channels, side, side}, options);
    const torch::Tensor w = torch::rand({channels, channels, 3, 3}, options);
    const double s = median_seconds(device, kKernelSeconds, [&] { (void)torch::conv2d(x, w, {}, 1, 1); });
    run.conv_flops_per_s = 2.0 * static_cast<double>(batch * channels * side * side * channels * 9) / s;
  }
  {
    // Three arrays of 64 MiB (256 MiB on a GPU): past any cache, as activations are.
    const std::int64_t elements = (device.is_cuda() ? 64 : 16) << 20;
    const torch::Tensor a = torch::rand({elements}, options), b = torch::rand({elements}, options);
    torch::Tensor c = torch::empty({elements}, options);
    const double s = median_seconds(device, kKernelSeconds, [&] { torch::add_out(c, a, b); });
    run.memory_bytes_per_s = 3.0 * 4.0 * static_cast<double>(elements) / s;
  }
  return run;
}

core::Calibration calibrate(c10::Device device, int runs) {
  // In the host-memory regime profile and execute run in: the convolution's outputs come warm from
  // the heap there, and are page-faulted afresh under glibc's defaults.
  core::enter_host_memory_regime();
  core::Calibration c;
  c.device = device_name(device);
  c.threads = at::get_num_threads();
  c.measured_at = utc_timestamp_now();
  for (int r = 0; r < std::max(runs, 1); ++r) c.runs.push_back(time_calibration_kernels(device));
  return c;
}

MachineTiming cached_calibration(c10::Device device, int max_age_s) {
  if (std::optional<core::Calibration> c = read_cached_calibration(device.is_cuda(), at::get_num_threads(), max_age_s)) {
    return {c, ""};
  }
  KeptCalibration timed = calibrate_and_keep(device);
  if (!timed.shared.empty()) return {std::nullopt, timed.shared + " while calibrating"};
  return {std::move(timed.calibration), ""};
}

KeptCalibration calibrate_and_keep(c10::Device device) {
  const CpuUsage before = cpu_usage_now();
  KeptCalibration timed{calibrate(device), ""};
  // A GPU's kernels do not share the CPU's cores.
  if (!device.is_cuda()) timed.shared = shared_with_others(before, cpu_usage_now(), timed.calibration.threads);
  if (timed.shared.empty()) save_cached_calibration(timed.calibration);
  return timed;
}

}  // namespace headroom::runtime
