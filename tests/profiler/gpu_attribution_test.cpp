// Attribution of GPU activity to layers, with records built in memory.
#include <gtest/gtest.h>

#include "profiler/gpu/activity.h"
#include "support/gpu_activity_fixture.h"

namespace headroom::profiler::gpu {
namespace {

using Fixture = testing::GpuActivityFixture;

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

}  // namespace
}  // namespace headroom::profiler::gpu
