// Chrome trace lanes of GPU activity (profiler/gpu/activity.h), with records built in memory.
#include <gtest/gtest.h>

#include "profiler/gpu/activity.h"
#include "support/gpu_activity_fixture.h"

namespace headroom::profiler::gpu {
namespace {

using Fixture = testing::GpuActivityFixture;

TEST(GpuChromeLanes, OneLanePerStreamWithLayerArgs) {
  Fixture f;
  core::ChromeTrace chrome;
  add_gpu_lanes(chrome, f.log, f.ranges, {"fc1", "gelu", "fc2"}, 1000, 2);
  const auto events = chrome.to_json()["traceEvents"];
  int kernels = 0, copies = 0, lanes = 0;
  for (const auto& e : events) {
    if (e["ph"] == "M" && e["name"] == "thread_name") ++lanes;
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["pid"], 2);
    if (e["cat"] == "kernel") ++kernels;
    if (e["cat"] == "copy") ++copies;
    if (e["name"] == "gelu") {
      EXPECT_EQ(e["args"]["layer"], "gelu");
      EXPECT_EQ(e["args"]["phase"], "forward");
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.0);  // (2000 - 1000) ns in microseconds
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 0.3);
    }
    if (e["name"] == "wgrad") {
      EXPECT_EQ(e["tid"], 1);  // stream 9 after stream 7
    }
    if (e["name"] == "stray") {
      EXPECT_FALSE(e["args"].contains("layer"));
    }
  }
  EXPECT_EQ(kernels, 7);
  EXPECT_EQ(copies, 2);
  EXPECT_EQ(lanes, 2);
}

}  // namespace
}  // namespace headroom::profiler::gpu
