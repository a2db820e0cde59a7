#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>

#include "core/errors.h"
#include "runtime/calibration.h"
#include "runtime/host_info.h"
#include "runtime/intra_op_threads.h"
#include "runtime/loss_scaler.h"
#include "runtime/memory_recorder.h"
#include "runtime/optimizer.h"
#include "runtime/tensor_bytes.h"
#include "support/scoped_env.h"
#include "support/spinning_child.h"

namespace headroom {
namespace {

// The state the planner estimates per parameter (planner/optimizer_estimate) is what these build.
TEST(Optimizer, StateIsOneOrTwoFloatsPerParameterAfterAStep) {
  for (const auto& [name, floats] : {std::pair{"sgd", 1}, std::pair{"adam", 2}}) {
    SCOPED_TRACE(name);
    const torch::Tensor w = torch::ones({8, 4}, torch::requires_grad());
    auto optimizer = runtime::make_optimizer(name, {w});
    EXPECT_EQ(runtime::optimizer_state_bytes(*optimizer), 0);
    w.sum().backward();
    optimizer->step();
    EXPECT_EQ(runtime::optimizer_state_bytes(*optimizer), floats * runtime::tensor_bytes(w));
  }
  EXPECT_THROW(runtime::make_optimizer("lamb", {}), core::InputError);
}

// fp16's dynamic loss scaling, with infs and NaNs injected: a step whose gradients hold any is
// skipped and the scale backs off; clean steps are unscaled exactly (the scale is a power of two),
// and after growth_interval clean steps in a row the scale grows; a skip restarts the count.
TEST(LossScaler, SkipsStepsWithInfOrNanBacksOffAndGrowsAfterCleanSteps) {
  runtime::LossScaleOptions options;
  options.initial_scale = 1024;
  options.growth_interval = 3;
  runtime::LossScaler scaler(torch::kCPU, options);
  EXPECT_EQ(scaler.buffer_bytes(), 12);  // scale, growth tracker, inf flag
  EXPECT_FLOAT_EQ(scaler.scale(torch::tensor(0.5f)).item<float>(), 512.0f);
  // A float16 loss is promoted, as GradScaler's: the default 65536 is past float16's largest.
  EXPECT_TRUE(std::isfinite(runtime::LossScaler(torch::kCPU).scale(torch::tensor(1.0f).to(torch::kHalf)).item<float>()));
  // A scalar parameter's gradient is 0-dimensional; a missing one is skipped.
  const auto scaled = [&](float by) {
    return std::vector<torch::Tensor>{torch::full({4}, 3 * by), torch::full({2, 2}, -by), torch::Tensor(), torch::tensor(by)};
  };
  const auto expect_scale = [&](double expected) { EXPECT_EQ(scaler.current_scale(), expected); };

  auto gradients = scaled(1024);
  gradients[1][0][1] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(scaler.unscale(gradients));
  scaler.update();
  expect_scale(512);
  gradients = scaled(512);
  gradients[0][2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(scaler.unscale(gradients));
  scaler.update();
  expect_scale(256);
  EXPECT_EQ(scaler.skipped_steps(), 2);

  for (int step = 0; step < 3; ++step) {
    gradients = scaled(256);
    EXPECT_TRUE(scaler.unscale(gradients));
    EXPECT_TRUE(torch::equal(gradients[0], torch::full({4}, 3.0f)));
    EXPECT_TRUE(torch::equal(gradients[1], torch::full({2, 2}, -1.0f)));
    EXPECT_EQ(gradients[3].item<float>(), 1.0f);
    scaler.update();
    expect_scale(step < 2 ? 256 : 512);
  }
  // Two clean steps, a skip, then two more: no growth, the count started again.
  for (const bool clean : {true, true, false, true, true}) {
    gradients = scaled(static_cast<float>(scaler.current_scale()));
    if (!clean) gradients[0][0] = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(scaler.unscale(gradients), clean);
    scaler.update();
  }
  expect_scale(256);
  EXPECT_EQ(scaler.skipped_steps(), 3);
}

// A scaled loss's gradients, unscaled, are the unscaled loss's: scaling changes nothing but the range.
TEST(LossScaler, UnscaledGradientsEqualTheUnscaledLosss) {
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({8, 16});
  torch::Tensor w = torch::randn({16, 4}).requires_grad_();
  torch::matmul(x, w).square().mean().backward();
  const torch::Tensor plain = w.grad().clone();
  w.mutable_grad() = torch::Tensor();
  runtime::LossScaler scaler(torch::kCPU);
  scaler.scale(torch::matmul(x, w).square().mean()).backward();
  EXPECT_FALSE(torch::equal(w.grad(), plain));
  ASSERT_TRUE(scaler.unscale({w.grad()}));
  EXPECT_TRUE(torch::allclose(w.grad(), plain, 1e-6, 0));
}

TEST(MemoryRecorder, SeesAllocationsWhileInstalledAndTheirOwners) {
  auto recorder = std::make_shared<runtime::MemoryRecorder>();
  {
    runtime::ScopedMemoryRecording recording(recorder);
    recorder->set_owner(3);
    const torch::Tensor kept = torch::empty({1024}, torch::kFloat32);
    recorder->set_owner(runtime::MemoryRecorder::kNoOwner);
    {
      const torch::Tensor transient = torch::empty({2048}, torch::kFloat32);
    }
    EXPECT_EQ(recorder->live_bytes_of(3), 4096);
    EXPECT_EQ(recorder->allocated(), 4096);
    EXPECT_EQ(recorder->peak(), 4096 + 8192);
  }
  const torch::Tensor unseen = torch::empty({4096}, torch::kFloat32);
  EXPECT_EQ(recorder->allocated(), 0);
}

// The allocator's own total (on CUDA the device's, workspaces allocated before recording began
// among it): as it stands after each report, and as it stood when recording began, from the first
// report whether that one allocated or freed. Reports of another device type are not this one's.
TEST(MemoryRecorder, KeepsTheAllocatorsOwnTotalAsRecordingBeganAndSince) {
  const c10::Device device(c10::DeviceType::CPU);
  for (const std::int64_t first_change : {std::int64_t{256}, std::int64_t{-256}}) {
    runtime::MemoryRecorder recorder(c10::DeviceType::CPU);
    EXPECT_EQ(recorder.device_allocated(), -1);
    EXPECT_EQ(recorder.device_allocated_at_start(), -1);
    recorder.reportMemoryUsage(reinterpret_cast<void*>(0x10), 512, 64 << 20, 96 << 20, c10::Device(c10::DeviceType::CUDA, 0));
    EXPECT_EQ(recorder.device_allocated(), -1);
    int block = 0;
    recorder.reportMemoryUsage(&block, first_change, static_cast<runtime::AllocatorTotal>((32 << 20) + first_change), 96 << 20, device);
    EXPECT_EQ(recorder.device_allocated_at_start(), 32 << 20) << first_change;
    EXPECT_EQ(recorder.device_allocated(), (32 << 20) + first_change);
    int other = 0;
    recorder.reportMemoryUsage(&other, 1024, static_cast<runtime::AllocatorTotal>((32 << 20) + first_change + 1024), 96 << 20, device);
    EXPECT_EQ(recorder.device_allocated_at_start(), 32 << 20);
    EXPECT_EQ(recorder.device_allocated(), (32 << 20) + first_change + 1024);
  }
}

// Frees of earlier owners' allocations after hold_frees_of_owners_below count as held: the holding
// peak is what the peak would have been had they stayed.
TEST(MemoryRecorder, CountsHeldFreesOfEarlierOwnersInTheHoldingPeak) {
  auto recorder = std::make_shared<runtime::MemoryRecorder>();
  runtime::ScopedMemoryRecording recording(recorder);
  recorder->set_owner(1);
  std::optional<torch::Tensor> input = torch::empty({1024}, torch::kFloat32);  // 4 KiB, an earlier layer's
  recorder->set_owner(2);
  std::optional<torch::Tensor> own = torch::empty({512}, torch::kFloat32);  // 2 KiB, the layer's own
  recorder->set_owner(runtime::MemoryRecorder::kNoOwner);
  recorder->hold_frees_of_owners_below(2);
  recorder->mark();
  input.reset();
  own.reset();
  const torch::Tensor later = torch::empty({2048}, torch::kFloat32);  // 8 KiB
  EXPECT_EQ(recorder->peak_since_mark(), 8192);                 // the later tensor alone
  EXPECT_EQ(recorder->peak_holding_since_mark(), 8192 + 4096);  // the input held; the own tensor not
  recorder->hold_frees_of_owners_below(0);
  recorder->mark();
  EXPECT_EQ(recorder->peak_holding_since_mark(), 8192);
}

// The calibration times its kernels and keeps the answer per machine and threads, so commands run
// one after another pay for it once; a cache it cannot read is measured around.
TEST(Calibration, TimesTheKernelsAndKeepsTheAnswer) {
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("headroom-calibration-" + std::to_string(::getpid()));
  std::optional<testing::ScopedEnv> cache_home(std::in_place, "XDG_CACHE_HOME", cache.string());
  const runtime::MachineTiming timed = runtime::cached_calibration(torch::kCPU);
  if (!timed.calibration) {
    // Beside another test's load: neither kept nor used, and said why (Cli.ATimingTakenBeside...).
    EXPECT_NE(timed.why_not.find("other processes kept"), std::string::npos) << timed.why_not;
    EXPECT_FALSE(std::filesystem::exists(cache / "headroom"));
    std::filesystem::remove_all(cache);
    GTEST_SKIP() << timed.why_not;
  }
  const core::Calibration first = *timed.calibration;
  ASSERT_EQ(first.runs.size(), 3u);
  for (const auto& r : first.runs) {
    EXPECT_GT(r.matmul_flops_per_s, 1e6);
    EXPECT_GT(r.conv_flops_per_s, 1e6);
    EXPECT_GT(r.memory_bytes_per_s, 1e6);
  }
  EXPECT_EQ(first.threads, at::get_num_threads());
  EXPECT_EQ(first.device, runtime::cpu_device_info().name);
  EXPECT_EQ(runtime::cached_calibration(torch::kCPU).calibration, first);  // from the cache
  const auto file = cache / "headroom" / ("calibration-v2-cpu-" + std::to_string(at::get_num_threads()) + "t.json");
  ASSERT_TRUE(std::filesystem::exists(file));
  std::ofstream(file) << "{ half";
  const runtime::MachineTiming again = runtime::cached_calibration(torch::kCPU);
  EXPECT_TRUE(again.calibration ? again.calibration->runs.size() == 3u : !again.why_not.empty());
  std::filesystem::remove_all(cache);
  cache_home.reset();
  EXPECT_GE(runtime::usable_cores(), 1);
}

TEST(HostInfo, NamesTheCpuAndItsMemory) {
  const core::DeviceInfo cpu = runtime::cpu_device_info();
  EXPECT_EQ(cpu.kind, "cpu");
  EXPECT_NE(cpu.name.find("cores"), std::string::npos) << cpu.name;
  EXPECT_GT(cpu.total_memory_bytes, 0);
  EXPECT_EQ(runtime::utc_timestamp_now().size(), std::string("2026-11-22T01:46:49Z").size());
}

TEST(HostInfo, CountsTheCoresOtherProcessesKeepBusy) {
  // Others' share is what the cores did less what this process did, over the wall time.
  const runtime::CpuUsage before{10.0, 100.0, 4.0, true}, after{12.0, 103.0, 5.0, true};
  EXPECT_DOUBLE_EQ(runtime::cores_busy_with_others(before, after), 1.0);
  EXPECT_EQ(runtime::cores_busy_with_others(before, runtime::CpuUsage{}), 0.0);

  // A child that spins is another process keeping a core busy.
  testing::SpinningChild child(std::chrono::seconds(2));
  ASSERT_TRUE(child.started());
  const runtime::IdleCores cores = runtime::measure_idle_cores(std::chrono::milliseconds(500));
  child.stop();
  if (!runtime::cpu_usage_now().known) GTEST_SKIP() << "no /proc/stat here";
  EXPECT_GT(cores.busy_with_others, 0.3);
  EXPECT_GE(cores.idle, 1);
  EXPECT_LE(cores.idle, cores.usable);
  if (cores.usable >= 2 && cores.busy_with_others > 0.5) {
    EXPECT_LT(cores.idle, cores.usable);
  }
}

// Both pools a step runs on follow the thread count, so `--threads 1` runs the matrix products on one
// thread too (they run on OpenBLAS's own pthreads, which at::set_num_threads does not reach).
TEST(IntraOpThreads, ReachBothPools) {
  const int before = at::get_num_threads();
  for (const int threads : {1, 2, 1}) {
    runtime::use_threads(threads);
    EXPECT_EQ(at::get_num_threads(), threads);
    const int blas = runtime::blas_threads();
    if (blas != 0) {
      EXPECT_EQ(blas, threads);
    }
  }
  runtime::use_threads(before);
}

}  // namespace
}  // namespace headroom
