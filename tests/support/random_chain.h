#pragma once
// Random checkpointing chains for the tests that check the DP and its bounds against trying every
// subset: small enough (at most 12 stages) for the exhaustive search.
#include <algorithm>
#include <cstdint>
#include <random>

#include "planner/checkpoint_dp.h"

namespace headroom::testing {

// Where the draws start; a chain with stages that free more than they keep takes lows below 0.
struct ChainDraws {
  std::int64_t stored_lo = 5;
  std::int64_t checkpointed_lo = 0;
  std::int64_t checkpointed_peak_lo = 0;
  std::int64_t recompute_lo = 1;
};

inline std::int64_t draw(std::mt19937& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

inline planner::Chain random_chain(std::mt19937& rng, const ChainDraws& d = {}) {
  planner::Chain chain;
  chain.base = draw(rng, 0, 50);
  const int n = static_cast<int>(draw(rng, 1, 12));
  for (int k = 0; k < n; ++k) {
    planner::ChainStage s;
    s.stored_bytes = draw(rng, d.stored_lo, 60);
    s.checkpointed_bytes = draw(rng, d.checkpointed_lo, s.stored_bytes);
    s.stored_peak = std::max<std::int64_t>(0, s.stored_bytes) + draw(rng, 0, 40);
    s.checkpointed_peak = s.stored_peak + draw(rng, d.checkpointed_peak_lo, 10);
    s.recompute_ns = draw(rng, d.recompute_lo, 100);
    s.checkpointable = draw(rng, 0, 9) > 0;
    chain.stages.push_back(s);
  }
  chain.tail_peak = draw(rng, 0, 30);
  return chain;
}

}  // namespace headroom::testing
