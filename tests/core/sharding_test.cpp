// Sharded data parallel's numbers (core/sharding.h): every trainable element owned by exactly one
// worker, worker 0 the most; a broadcast's time on the link.
#include <gtest/gtest.h>

#include "core/collective.h"
#include "core/errors.h"
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

TEST(Sharding, TwoRangesShareTheirOverlap) {
  EXPECT_EQ(core::overlap({0, 10}, {5, 20}), (core::ElementRange{5, 10}));
  EXPECT_EQ(core::overlap({5, 20}, {0, 10}), (core::ElementRange{5, 10}));
  EXPECT_EQ(core::overlap({0, 5}, {5, 9}).size(), 0);
  EXPECT_EQ(core::overlap({0, 3}, {7, 9}).size(), 0);
}

// Stage 3 gathers a unit's elements with a broadcast from each owner of a part of them.
TEST(Sharding, AGatherIsABroadcastFromEachOwnerOfAPart) {
  const core::CollectiveLink link = core::parse_link("1GB/s,10us");
  EXPECT_EQ(core::shard_stage_name(3), "stage 3 (optimizer state, gradients and parameters sharded)");
  EXPECT_THROW(core::shard_stage_name(core::kMaxShardStage + 1), std::logic_error);
  // An embedding's backward reads no table: it is gathered for its forward alone.
  EXPECT_FALSE(core::backward_reads_parameters("embedding"));
  EXPECT_TRUE(core::backward_reads_parameters("linear"));
  // 1000 elements over 2 workers: 0-499 and 500-999.
  EXPECT_EQ(core::gather_ns({100, 300}, 1000, 2, link), core::broadcast_ns(800, 2, link));
  EXPECT_EQ(core::gather_ns({400, 700}, 1000, 2, link), core::broadcast_ns(400, 2, link) + core::broadcast_ns(800, 2, link));
  EXPECT_EQ(core::gather_ns({400, 400}, 1000, 2, link), 0);
  EXPECT_EQ(core::gather_ns({0, 1000}, 1000, 1, link), 0);
  // Over 3 workers (334, 334, 332) a whole model is three broadcasts of two rounds each.
  EXPECT_EQ(core::gather_ns({0, 1000}, 1000, 3, link),
            2 * core::broadcast_ns(4 * 334, 3, link) + core::broadcast_ns(4 * 332, 3, link));
  // Timed by the link's gather line where it was measured (a broadcast into fresh memory), not the broadcast's.
  core::CollectiveLink measured = link;
  measured.broadcast = {4e9, 50'000};
  measured.gather = {1e9, 200'000};
  EXPECT_EQ(core::gather_ns({100, 300}, 1000, 2, measured), 200'000 + 800);
  EXPECT_EQ(core::gather_ns({400, 700}, 1000, 2, measured), 2 * 200'000 + 1'200);
  EXPECT_EQ(core::broadcast_ns(800, 2, measured), 50'000 + 200);
}

// A stage-3 worker gathers a block's parameters together, as FSDP wraps a transformer's blocks
// (each layer outside blocks a unit of its own, even beside another one), or each layer's alone.
TEST(Sharding, AUnitIsABlockOrOneLayer) {
  using core::GatherUnit;
  EXPECT_EQ(core::parameter_units({-1, -1, 0, 0, 0, 1, 1, -1, -1}, GatherUnit::Block),
            (std::vector<int>{0, 1, 2, 2, 2, 3, 3, 4, 5}));
  EXPECT_EQ(core::parameter_units({-1, -1, 0, 0, 0, 1, 1, -1, -1}, GatherUnit::Layer),
            (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  // A block id met again after another block's layers starts a new unit: units are contiguous.
  EXPECT_EQ(core::parameter_units({0, 0, 1, 0}, GatherUnit::Block), (std::vector<int>{0, 0, 1, 2}));
  EXPECT_EQ(core::parameter_units({}, GatherUnit::Block), std::vector<int>{});
  EXPECT_EQ(core::gather_unit_name(GatherUnit::Block), "block");
  EXPECT_EQ(core::parse_gather_unit("layer", "--gather"), GatherUnit::Layer);
  try {
    core::parse_gather_unit("blocks", "--gather");
    FAIL() << "expected an InputError";
  } catch (const core::InputError& e) {
    EXPECT_STREQ(e.what(), "--gather: expected block or layer, got 'blocks'");
  }
}

}  // namespace
}  // namespace headroom
