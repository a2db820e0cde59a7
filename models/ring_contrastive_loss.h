#pragma once
// Inf-CL's ring variant (docs/design.md, "Inf-CL"): the tiled symmetric InfoNCE of
// models/contrastive_loss.h over a global batch whose rows are spread over N workers. Each worker
// holds its rows of q and k; the k blocks travel the ring, each carrying its columns' partial
// log-sum-exp, and every worker folds the block into its rows' lse and the block's columns' lse as
// log(e^a + e^b), stably (a = -inf until something is merged). Backward sends the blocks round again
// with their column lse, and each block's dk accumulates on its way round and comes home. No worker
// ever holds more than its own rows, two blocks of another worker's and the tiles' logits.
//
// The workers are reached through `RingPeers` (the executor's is c10d's process group,
// executor/ring_peers.h), so this file stays free of c10d.
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "models/contrastive_loss.h"

namespace headroom::models {

class RingPeers {
 public:
  virtual ~RingPeers() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // A point-to-point transfer under way; wait() returns once it is complete (or throws).
  class Transfer {
   public:
    virtual ~Transfer() = default;
    virtual void wait() = 0;
  };
  // Sends `out` to the next rank (rank + 1 mod N) and receives into `in` from the previous one.
  // Both must be contiguous and stay alive until wait(); `tag` keeps concurrent shifts apart.
  virtual std::unique_ptr<Transfer> shift(const torch::Tensor& out, torch::Tensor& in, int tag) = 0;
  // `t` becomes the sum of every rank's `t`.
  virtual void all_reduce_sum(torch::Tensor& t) = 0;
  // Every rank's `mine`, rank by rank.
  virtual std::vector<std::int64_t> all_gather(std::int64_t mine) = 0;
};

// The loss over the global batch (every rank's rows, rank after rank), the same value on every
// rank. q and k are this rank's rows ([b_r, D], b_r > 0; ranks may hold different counts). Backward
// gives this rank's rows of dL/dq and dL/dk of the global loss, and the log-scale's gradient from
// this rank's rows only: summed over the ranks (as data parallel's all-reduce does) it is the whole.
// Every rank must call it, and backward, in the same order. Throws std::invalid_argument for
// non-positive tiles or mismatched shapes (on this rank), std::runtime_error when a transfer fails.
torch::Tensor contrastive_loss_ring(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& log_scale,
                                    LossTiles tiles, RingPeers& peers);

}  // namespace headroom::models
