#include <gtest/gtest.h>

#include <random>

#include "planner/checkpoint_dp.h"
#include "support/random_chain.h"

namespace headroom {
namespace {

// Random chains of up to 12 stages with integer sizes: the DP (unit 1, so exact) and trying every
// subset agree on feasibility and recompute time, and the DP's peak is what its choice gives.
TEST(CheckpointDp, EqualsExhaustiveSearch) {
  std::mt19937 rng(42);
  int feasible = 0;
  for (int round = 0; round < 400; ++round) {
    const planner::Chain chain = testing::random_chain(rng);
    const auto n = static_cast<std::int64_t>(chain.stages.size());
    const std::int64_t limit = testing::draw(rng, chain.base, chain.base + 40 * n);
    const auto dp = planner::solve_checkpoint_dp(chain, limit, 1);
    const auto brute = planner::solve_checkpoint_exhaustive(chain, limit);
    ASSERT_EQ(dp.feasible, brute.feasible) << "round " << round;
    if (!dp.feasible) continue;
    ++feasible;
    EXPECT_EQ(dp.recompute_ns, brute.recompute_ns) << "round " << round;
    EXPECT_EQ(dp.peak_bytes, planner::chain_peak(chain, dp.checkpoint));
    EXPECT_LE(dp.peak_bytes, limit);
    if (dp.checkpoint == brute.checkpoint) {
      EXPECT_EQ(dp.peak_bytes, brute.peak_bytes);
    }
  }
  EXPECT_GT(feasible, 100);  // the rounds exercise the interesting cases, not only infeasible ones
}

TEST(CheckpointDp, CoarseUnitsStayWithinTheLimit) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    planner::Chain chain;
    chain.base = 1000;
    for (int k = 0; k < 10; ++k) {
      const std::int64_t stored = std::uniform_int_distribution<std::int64_t>(100, 900)(rng);
      chain.stages.push_back({stored, stored / 5, stored + 333, stored + 400, 10 + k, true});
    }
    const std::int64_t limit = std::uniform_int_distribution<std::int64_t>(2000, 9000)(rng);
    const auto dp = planner::solve_checkpoint_dp(chain, limit, 97);
    if (dp.feasible) {
      EXPECT_LE(planner::chain_peak(chain, dp.checkpoint), limit);
    }
    // Rounding can only cost optimality, never admit a plan the exact DP would reject.
    const auto exact = planner::solve_checkpoint_dp(chain, limit, 1);
    if (dp.feasible) {
      EXPECT_TRUE(exact.feasible);
      EXPECT_GE(dp.recompute_ns, exact.recompute_ns);
    }
  }
}

// Random chains small enough to try every subset: the bound on the least recompute is that least
// recompute (nothing needs merging), and nothing when no subset fits; the bound on the least peak
// is at most every subset's peak. Kept sizes may be 0 or less (a stage that frees more than it keeps).
TEST(CheckpointDp, RecomputeBoundIsTheLeastRecomputeOfSmallChains) {
  std::mt19937 rng(36);
  int feasible = 0;
  for (int round = 0; round < 400; ++round) {
    const planner::Chain chain = testing::random_chain(rng, {.stored_lo = -5, .checkpointed_lo = -5, .checkpointed_peak_lo = -10, .recompute_lo = 0});
    const auto n = static_cast<std::int64_t>(chain.stages.size());
    const std::int64_t limit = testing::draw(rng, chain.base - 10, chain.base + 40 * n);
    const auto brute = planner::solve_checkpoint_exhaustive(chain, limit);
    const auto bound = planner::least_recompute_bound(chain, limit);
    ASSERT_EQ(bound.has_value(), brute.feasible) << "round " << round;
    if (brute.feasible) {
      ++feasible;
      EXPECT_EQ(*bound, brute.recompute_ns) << "round " << round;
    }
    // The least peak of any subset: the exhaustive search at the lowest limit that admits one.
    const auto least_peak = planner::least_chain_peak_bound(chain);
    EXPECT_FALSE(planner::solve_checkpoint_exhaustive(chain, least_peak - 1).feasible) << "round " << round;
  }
  EXPECT_GT(feasible, 100);
}

// Chains too long to keep every kept size apart: merged, the bound stays at most what the DP finds.
TEST(CheckpointDp, RecomputeBoundOfLongChainsIsAtMostTheDps) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    planner::Chain chain;
    chain.base = 1000;
    for (int k = 0; k < 60; ++k) {
      const std::int64_t stored = std::uniform_int_distribution<std::int64_t>(100, 900)(rng);
      chain.stages.push_back({stored, stored / 5 + k, stored + 333, stored / 5 + 400, 10 + k * 7 % 13, true});
    }
    const std::int64_t limit = std::uniform_int_distribution<std::int64_t>(6000, 30000)(rng);
    const auto dp = planner::solve_checkpoint_dp(chain, limit, 1);
    const auto bound = planner::least_recompute_bound(chain, limit);
    if (dp.feasible) {
      ASSERT_TRUE(bound.has_value()) << "round " << round;
      EXPECT_LE(*bound, dp.recompute_ns) << "round " << round;
    }
  }
}

}  // namespace
}  // namespace headroom
