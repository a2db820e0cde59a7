// The link a collective runs over (core/collective.h): a bandwidth and a latency as --link gives
// them, and a ring all-reduce's time over it.
#include <gtest/gtest.h>

#include "core/collective.h"
#include "core/errors.h"

namespace headroom {
namespace {

TEST(CollectiveLink, ParsesBandwidthAndLatency) {
  const auto link = core::parse_link("25GB/s,5us");
  EXPECT_DOUBLE_EQ(link.bytes_per_second, 25e9);
  EXPECT_EQ(link.latency_ns, 5000);
  EXPECT_EQ(link.source, "given");
  EXPECT_DOUBLE_EQ(core::parse_link("1.5 GiB/s, 200ns").bytes_per_second, 1.5 * 1073741824.0);
  EXPECT_EQ(core::parse_link("100MB/s,2ms").latency_ns, 2'000'000);
  for (const std::string bad : {"", "25GB/s", "25,5us", "25GB/s,5", "-1GB/s,5us", "25GB/s,5us,1", "abc,5us", "0.5B/s,1us",
                                "1000TB/s,1us", "1GB/s,11s", "nanGB/s,1us"}) {
    EXPECT_THROW(core::parse_link(bad), core::InputError) << bad;
  }
  try {
    core::parse_link("25Gb/s,5us");
    FAIL();
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown bandwidth unit 'Gb/s'"), std::string::npos) << e.what();
  }
}

TEST(CollectiveLink, RingAllReduceCost) {
  const core::CollectiveLink link{.bytes_per_second = 1e9, .latency_ns = 10'000, .source = "given"};
  EXPECT_EQ(core::ring_allreduce_ns(1 << 20, 1, link), 0);
  // 2 workers: 2 steps of half the buffer each: 2 * (10 us + 524288 B / 1 GB/s) = 1,068,576 ns.
  EXPECT_EQ(core::ring_allreduce_ns(1 << 20, 2, link), 1'068'576);
  // 4 workers: 6 steps of a quarter: 6 * (10 us + 262144 ns) = 1,632,864 ns.
  EXPECT_EQ(core::ring_allreduce_ns(1 << 20, 4, link), 1'632'864);
}

}  // namespace
}  // namespace headroom
