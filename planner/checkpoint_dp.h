#pragma once
// Which blocks of a chain to checkpoint, by dynamic programming over discretized memory (after
// rotor, Beaumont et al. 2019: least recompute time under a memory limit). Each stage is either
// stored (all its activations kept until its backward) or checkpointed (only what its recompute
// needs is kept; its forward runs again in backward). A stage's local peak happens while earlier
// stages hold what they keep, so the peak of a choice is
//   max( max_k  base + sum_{j<k} kept_j(c_j) + local_peak_k(c_k),   base + sum_j kept_j(c_j) + tail )
// The DP is exact when sizes are multiples of `unit`; otherwise it rounds kept sizes up, so the
// plans it returns always satisfy the limit.
#include <cstdint>
#include <optional>
#include <vector>

namespace headroom::planner {

struct ChainStage {
  std::int64_t stored_bytes = 0;        // kept while later stages run, if stored
  std::int64_t checkpointed_bytes = 0;  // kept while later stages run, if checkpointed
  std::int64_t stored_peak = 0;         // local peak above the prefix, if stored
  std::int64_t checkpointed_peak = 0;   // local peak above the prefix, if checkpointed
  std::int64_t recompute_ns = 0;        // extra time if checkpointed
  bool checkpointable = true;
};

struct Chain {
  std::int64_t base = 0;  // held before the first stage
  std::vector<ChainStage> stages;
  std::int64_t tail_peak = 0;  // local peak after the last stage, above everything kept
};

struct ChainSolution {
  bool feasible = false;
  std::vector<bool> checkpoint;
  std::int64_t recompute_ns = 0;
  std::int64_t peak_bytes = 0;
};

std::int64_t chain_peak(const Chain& chain, const std::vector<bool>& checkpoint);

// Least recompute time with chain_peak <= limit; ties go to the lower peak.
ChainSolution solve_checkpoint_dp(const Chain& chain, std::int64_t limit, std::int64_t unit);
// At most the least recompute time of any checkpointing with chain_peak <= limit (what
// solve_checkpoint_dp can return, whatever its unit), or nothing when none has. It keeps, stage
// by stage, the kept sizes no choice beats in both size and time; where too many remain it merges
// neighbours (the smaller size with the lesser time), which only lowers the answer.
std::optional<std::int64_t> least_recompute_bound(const Chain& chain, std::int64_t limit);

// At most chain_peak of every choice: each stage keeping and peaking at the lesser of its two ways.
std::int64_t least_chain_peak_bound(const Chain& chain);

// The same by trying every subset (for tests; 2^stages).
ChainSolution solve_checkpoint_exhaustive(const Chain& chain, std::int64_t limit);

}  // namespace headroom::planner
