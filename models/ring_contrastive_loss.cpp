#include "models/ring_contrastive_loss.h"

#include <limits>
#include <stdexcept>
#include <string>

namespace headroom::models {

namespace {

// Tags of the ring's three kinds of block: each kind's transfers arrive in order, and the kinds
// may be under way at once.
constexpr int kKeysTag = 1601, kLseTag = 1602, kGradTag = 1603;

// a := log(e^a + e^b), elementwise and stably; a may be -inf (nothing merged into it yet), b is
// finite (a tile's log-sum-exp).
void merge_lse(torch::Tensor a, const torch::Tensor& b) {
  const torch::Tensor m = at::maximum(a, b);
  a.copy_(at::add((a - m).exp_(), (b - m).exp_()).log_().add_(m));
}

// Folds the tiles of qs x kb^T into the running lse of qs's rows and of kb's rows (the block's
// columns): each tile's own log-sum-exp (max subtracted) merged into both.
void fold_block(const torch::Tensor& qs, const torch::Tensor& kb, LossTiles tiles, torch::Tensor& lse_rows,
                torch::Tensor& lse_cols) {
  const std::int64_t rows = qs.size(0), cols = kb.size(0);
  for (std::int64_t r0 = 0; r0 < rows; r0 += tiles.rows) {
    const std::int64_t rb = std::min(tiles.rows, rows - r0);
    const torch::Tensor qb = qs.narrow(0, r0, rb);
    for (std::int64_t c0 = 0; c0 < cols; c0 += tiles.cols) {
      const std::int64_t cb = std::min(tiles.cols, cols - c0);
      const torch::Tensor x = at::mm(qb, kb.narrow(0, c0, cb).t());
      merge_lse(lse_rows.narrow(0, r0, rb), x.logsumexp(1));
      merge_lse(lse_cols.narrow(0, c0, cb), x.logsumexp(0));
    }
  }
}

struct Ring {
  RingPeers* peers = nullptr;
  std::vector<std::int64_t> shares;  // rows per rank
  int rank = 0, size = 1;
  // The rank whose block this rank holds at ring step t.
  int owner(int t) const { return ((rank - t) % size + size) % size; }
  std::int64_t global() const {
    std::int64_t b = 0;
    for (const auto s : shares) b += s;
    return b;
  }
};

Ring ring_of(RingPeers& peers, const std::vector<std::int64_t>& shares) {
  Ring ring;
  ring.peers = &peers;
  ring.shares = shares;
  ring.rank = peers.rank();
  ring.size = peers.size();
  return ring;
}

struct RingContrastiveLoss : public torch::autograd::Function<RingContrastiveLoss> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qs, const torch::Tensor& k,
                               LossTiles tiles, RingPeers* peers, const std::vector<std::int64_t>& shares) {
    const Ring ring = ring_of(*peers, shares);
    const auto options = qs.options();
    const double inf = std::numeric_limits<double>::infinity();
    const torch::Tensor own_k = k.contiguous();
    torch::Tensor lse_rows = at::full({qs.size(0)}, -inf, options);
    // The block this rank holds and its columns' lse so far; at step 0 its own.
    torch::Tensor block = own_k, block_lse = at::full({k.size(0)}, -inf, options), lse_cols;
    for (int t = 0; t < ring.size; ++t) {
      const bool last = t + 1 == ring.size;
      std::unique_ptr<RingPeers::Transfer> keys_in_flight;
      torch::Tensor next_block;
      if (!last) {
        // The next block travels while this one is folded.
        next_block = at::empty({ring.shares[static_cast<std::size_t>(ring.owner(t + 1))], k.size(1)}, options);
        keys_in_flight = peers->shift(block, next_block, kKeysTag);
      }
      fold_block(qs, block, tiles, lse_rows, block_lse);
      // The block's columns' lse goes on with it; after the last step it goes home (to rank + 1,
      // whose block the last step held).
      torch::Tensor next_lse = at::empty({ring.shares[static_cast<std::size_t>(ring.owner(t + 1))]}, options);
      if (ring.size > 1) {
        peers->shift(block_lse, next_lse, kLseTag)->wait();
      } else {
        next_lse = block_lse;
      }
      if (keys_in_flight) keys_in_flight->wait();
      if (last) {
        lse_cols = next_lse;
      } else {
        block = next_block;
        block_lse = next_lse;
      }
    }
    const double b = static_cast<double>(ring.global());
    torch::Tensor contribution = (lse_rows.sum() + lse_cols.sum()).div_(2 * b).sub_((qs * k).sum().div_(b)).reshape({1});
    peers->all_reduce_sum(contribution);
    ctx->save_for_backward({qs, k, lse_rows, lse_cols});
    ctx->saved_data["rows"] = tiles.rows;
    ctx->saved_data["cols"] = tiles.cols;
    // The peers outlive the step that made this graph (the executor's workers outlive every step).
    ctx->saved_data["peers"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(peers));
    ctx->saved_data["shares"] = shares;
    return contribution.reshape({});
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& qs = saved[0];
    const torch::Tensor& k = saved[1];
    const torch::Tensor& lse_rows = saved[2];
    const torch::Tensor& lse_cols = saved[3];
    const LossTiles tiles{ctx->saved_data["rows"].toInt(), ctx->saved_data["cols"].toInt()};
    auto* peers = reinterpret_cast<RingPeers*>(static_cast<std::intptr_t>(ctx->saved_data["peers"].toInt()));
    const Ring ring = ring_of(*peers, ctx->saved_data["shares"].toIntVector());
    const auto options = qs.options();
    const double b = static_cast<double>(ring.global());
    const torch::Tensor g = grad_outputs[0];
    // dL/dlse is 1/(2B) for every row and every column lse (every rank backpropagates the same loss).
    const torch::Tensor per_lse = g / (2 * b);
    torch::Tensor dqs = at::zeros_like(qs);
    torch::Tensor block = k.contiguous(), block_lse = lse_cols, block_dk = at::zeros_like(k), dk;
    for (int t = 0; t < ring.size; ++t) {
      const bool last = t + 1 == ring.size;
      const std::int64_t next_rows = ring.shares[static_cast<std::size_t>(ring.owner(t + 1))];
      std::unique_ptr<RingPeers::Transfer> keys_in_flight, lse_in_flight;
      torch::Tensor next_block, next_lse;
      if (!last) {
        next_block = at::empty({next_rows, k.size(1)}, options);
        next_lse = at::empty({next_rows}, options);
        keys_in_flight = peers->shift(block, next_block, kKeysTag);
        lse_in_flight = peers->shift(block_lse, next_lse, kLseTag);
      }
      accumulate_tile_gradients(qs, block, lse_rows, block_lse, per_lse, tiles, dqs, block_dk);
      // The block's dk goes on with it; after the last step, home.
      torch::Tensor next_dk;
      if (ring.size > 1) {
        next_dk = at::empty({next_rows, k.size(1)}, options);
        peers->shift(block_dk, next_dk, kGradTag)->wait();
      } else {
        next_dk = block_dk;
      }
      if (keys_in_flight) keys_in_flight->wait();
      if (lse_in_flight) lse_in_flight->wait();
      if (last) {
        dk = next_dk;
      } else {
        block = next_block;
        block_lse = next_lse;
        block_dk = next_dk;
      }
    }
    // The positives (this rank's own pairs): -k_i / B for q~_i, -q~_i / B for k_i.
    const torch::Tensor per_positive = g / b;
    dqs.addcmul_(k, per_positive, -1);
    dk.addcmul_(qs, per_positive, -1);
    return {dqs, dk, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor contrastive_loss_ring(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& log_scale,
                                    LossTiles tiles, RingPeers& peers) {
  if (q.dim() != 2 || k.dim() != 2 || q.sizes() != k.sizes() || q.size(0) == 0) {
    throw std::invalid_argument("ring contrastive loss: expected two [b, D] embeddings of one shape with b > 0 on rank " +
                                std::to_string(peers.rank()));
  }
  if (tiles.rows <= 0 || tiles.cols <= 0) {
    throw std::invalid_argument("ring contrastive loss: tile rows and columns must be positive, got " +
                                std::to_string(tiles.rows) + " x " + std::to_string(tiles.cols));
  }
  // Every rank's share: blocks of other ranks arrive with their own row counts.
  const std::vector<std::int64_t> shares = peers.all_gather(q.size(0));
  const torch::Tensor qs = (q * log_scale.exp()).contiguous();
  return RingContrastiveLoss::apply(qs, k, tiles, &peers, shares);
}

}  // namespace headroom::models
