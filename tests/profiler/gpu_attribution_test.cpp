// Attribution of GPU activity to layers, with records built in memory.
#include <gtest/gtest.h>

#include "profiler/gpu/activity.h"

namespace headroom::profiler::gpu {
namespace {

// Three layers; forward of layer 0 and 1, backward of layer 1, the optimizer, and one kernel
// launched outside any range.
struct Fixture {
  RangeTable ranges;
  ActivityLog log;
  std::uint64_t fwd0, fwd1, bwd1, opt;

  Fixture() {
    fwd0 = ranges.open(0, Phase::Forward);
    fwd1 = ranges.open(1, Phase::Forward);
    bwd1 = ranges.open(1, Phase::Backward);
    opt = ranges.open(-1, Phase::Optimizer);
    log.external_ids = {{10, fwd0}, {11, fwd0}, {20, fwd1}, {30, bwd1}, {31, bwd1}, {40, opt}};
    log.kernels = {
        {"gemm", 1000, 1400, 0, 7, 10},
        {"bias", 1500, 1600, 0, 7, 11},
        {"gelu", 2000, 2300, 0, 7, 20},
        // Two backward kernels on different streams that overlap: each counts in the sum, the span
        // covers both once.
        {"dgrad", 3000, 3500, 0, 7, 30},
        {"wgrad", 3200, 3900, 0, 9, 31},
        {"adam", 5000, 5250, 0, 7, 40},
        {"stray", 6000, 6010, 0, 7, 99},
    };
    log.copies = {{CopyActivity::Kind::Memset, 4096, 1700, 1750, 0, 7, 11},
                  {CopyActivity::Kind::HostToDevice, 1 << 20, 500, 900, 0, 7, 77}};
    log.memory = {{true, 0x1000, 2 << 20, 1001, 0, 20}, {false, 0x1000, 2 << 20, 5500, 0, 40}};
  }
};

TEST(GpuAttribution, SumsSpansAndCountsPerLayerAndPhase) {
  Fixture f;
  const StepAttribution a = attribute(f.log, f.ranges, 3);
  ASSERT_EQ(a.forward.size(), 3u);
  ASSERT_EQ(a.backward.size(), 3u);

  EXPECT_EQ(a.forward[0].kernel_ns, 400 + 100);
  EXPECT_EQ(a.forward[0].kernels, 2);
  EXPECT_EQ(a.forward[0].copy_ns, 50);
  EXPECT_EQ(a.forward[0].copies, 1);
  EXPECT_EQ(a.forward[0].span_ns, 1750 - 1000);  // the memset ends last

  EXPECT_EQ(a.forward[1].kernel_ns, 300);
  EXPECT_EQ(a.forward[1].span_ns, 300);
  EXPECT_EQ(a.forward[1].malloc_bytes, 2 << 20);

  EXPECT_EQ(a.backward[1].kernel_ns, 500 + 700);
  EXPECT_EQ(a.backward[1].kernels, 2);
  EXPECT_EQ(a.backward[1].span_ns, 3900 - 3000);
  EXPECT_LT(a.backward[1].span_ns, a.backward[1].kernel_ns);  // overlap

  EXPECT_EQ(a.backward[0], GpuWork{});
  EXPECT_EQ(a.forward[2], GpuWork{});
  EXPECT_EQ(a.optimizer.kernel_ns, 250);
  EXPECT_EQ(a.optimizer.malloc_bytes, 0);  // a release is not an allocation

  EXPECT_EQ(a.unattributed.kernels, 1);
  EXPECT_EQ(a.unattributed.copies, 1);
  EXPECT_EQ(a.unattributed.kernel_ns, 10);
  EXPECT_EQ(a.kernel_ns, 400 + 100 + 300 + 500 + 700 + 250 + 10);
}

TEST(GpuAttribution, RangesOfUnknownLayersAreUnattributedNotLost) {
  Fixture f;
  const StepAttribution a = attribute(f.log, f.ranges, 1);  // layer 1 is out of range now
  EXPECT_EQ(a.forward[0].kernels, 2);
  EXPECT_EQ(a.unattributed.kernels, 1 + 1 + 2);
  std::int64_t total = a.optimizer.kernel_ns + a.unattributed.kernel_ns;
  for (const auto& w : a.forward) total += w.kernel_ns;
  for (const auto& w : a.backward) total += w.kernel_ns;
  EXPECT_EQ(total, a.kernel_ns);
}

TEST(GpuAttribution, RangeIdsStartAtOneAndZeroIsNoRange) {
  RangeTable ranges;
  EXPECT_EQ(ranges.find(0), nullptr);
  EXPECT_EQ(ranges.open(4, Phase::Backward), 1u);
  ASSERT_NE(ranges.find(1), nullptr);
  EXPECT_EQ(ranges.find(1)->layer, 4);
  EXPECT_EQ(ranges.find(2), nullptr);
}

TEST(GpuAttribution, LogsAppendWithoutLosingRecords) {
  Fixture f;
  ActivityLog more;
  more.kernels = {{"k", 1, 2, 0, 1, 50}};
  more.external_ids = {{50, f.fwd1}};
  more.dropped_records = 3;
  f.log.append(std::move(more));
  EXPECT_EQ(f.log.kernels.size(), 8u);
  EXPECT_EQ(f.log.external_ids.at(50), f.fwd1);
  EXPECT_EQ(f.log.dropped_records, 3u);
}

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
