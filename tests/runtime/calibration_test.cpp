#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "runtime/calibration.h"
#include "runtime/host_info.h"
#include "support/scoped_env.h"

namespace headroom {
namespace {

// The calibration times its kernels and keeps the answer per machine and threads, so commands run
// one after another pay for it once; a cache it cannot read is measured around.
TEST(Calibration, TimesTheKernelsAndKeepsTheAnswer) {
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("headroom-calibration-" + std::to_string(::getpid()));
  std::optional<testing::ScopedEnv> cache_home(std::in_place, "XDG_CACHE_HOME", cache.string());
  // A quiet machine, whatever runs beside the test (a busy one: Cli.ATimingTakenBeside...).
  const testing::ScopedEnv quiet(runtime::kAssumedOthersVariable, "0");
  const runtime::MachineTiming timed = runtime::cached_calibration(torch::kCPU);
  ASSERT_TRUE(timed.calibration) << timed.why_not;
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

}  // namespace
}  // namespace headroom
