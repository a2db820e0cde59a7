#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "runtime/host_info.h"
#include "support/scoped_env.h"
#include "support/spinning_child.h"

namespace headroom {
namespace {

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

// A test of what a quiet or a busy machine makes of a timing sets the load it needs: the variable
// replaces the readings, and a value that is not a number of cores is ignored, with a warning.
TEST(HostInfo, TakesTheLoadATestSets) {
  const runtime::CpuUsage before{10.0, 100.0, 4.0, true}, after{12.0, 103.0, 5.0, true};
  {
    const testing::ScopedEnv busy(runtime::kAssumedOthersVariable, "1.5");
    EXPECT_DOUBLE_EQ(runtime::cores_busy_with_others(before, after), 1.5);
    EXPECT_DOUBLE_EQ(runtime::cores_busy_with_others(runtime::CpuUsage{}, runtime::CpuUsage{}), 1.5);
  }
  for (const char* bad : {"two", "-1", "nan", "1x"}) {
    const testing::ScopedEnv spoiled(runtime::kAssumedOthersVariable, bad);
    EXPECT_DOUBLE_EQ(runtime::cores_busy_with_others(before, after), 1.0) << bad;
  }
}

}  // namespace
}  // namespace headroom
