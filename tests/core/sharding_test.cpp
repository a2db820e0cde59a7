// Sharded data parallel's numbers (core/sharding.h): every trainable element owned by exactly one
// worker, worker 0 the most; a broadcast's time on the link.
#include <gtest/gtest.h>

#include "core/collective.h"
#include "core/sharding.h"

namespace headroom {
namespace {

TEST(Sharding, EveryElementHasOneOwnerAndWorkerZeroTheMost) {
  for (const std::int64_t elements : {0LL, 1LL, 7LL, 1000LL, 1000001LL}) {
    for (const int workers : {1, 2, 3, 4, 8}) {
      std::int64_t next = 0;
      for (int r = 0; r < workers; ++r) {
        const core::ElementRange range = core::owned_elements(elements, workers, r);
        EXPECT_EQ(range.begin, next) << elements << " over " << workers;
        EXPECT_LE(range.size(), core::owned_elements(elements, workers, 0).size());
        next = range.end;
      }
      EXPECT_EQ(next, elements) << elements << " over " << workers;
    }
  }
  EXPECT_EQ(core::owned_elements(7, 2, 0), (core::ElementRange{0, 4}));
  EXPECT_EQ(core::owned_elements(7, 2, 1), (core::ElementRange{4, 7}));
  // More workers than elements: the last ones own nothing.
  EXPECT_EQ(core::owned_elements(2, 4, 3).size(), 0);
  EXPECT_THROW(core::owned_elements(8, 2, 2), std::logic_error);
}

TEST(Sharding, ABroadcastIsOneMessagePerRoundOfItsTree) {
  const core::CollectiveLink link = core::parse_link("1GB/s,10us");
  EXPECT_EQ(core::broadcast_ns(0, 2, link), 0);
  EXPECT_EQ(core::broadcast_ns(1000, 1, link), 0);
  EXPECT_EQ(core::broadcast_ns(1'000'000, 2, link), 10'000 + 1'000'000);
  // Four workers: two rounds.
  EXPECT_EQ(core::broadcast_ns(1'000'000, 4, link), 2 * (10'000 + 1'000'000));
  EXPECT_EQ(core::shard_stage_name(1), "stage 1 (optimizer state sharded)");
  // A reduce in 3 collectives: three latencies a round.
  EXPECT_EQ(core::reduce_ns(1'000'000, 3, 2, link), 3 * 10'000 + 1'000'000);
  EXPECT_EQ(core::reduce_ns(1'000'000, 3, 4, link), 2 * (3 * 10'000 + 1'000'000));
  // Measured lines of their own, where the link has them.
  core::CollectiveLink measured = link;
  measured.broadcast = {2e9, 50'000};
  measured.reduce = {0.5e9, 70'000};
  EXPECT_EQ(core::broadcast_ns(1'000'000, 2, measured), 50'000 + 500'000);
  EXPECT_EQ(core::reduce_ns(1'000'000, 2, 2, measured), 2 * 70'000 + 2'000'000);
}

}  // namespace
}  // namespace headroom
