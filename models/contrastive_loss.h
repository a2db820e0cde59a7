#pragma once
// Symmetric InfoNCE (CLIP's loss) over a batch of paired embeddings, two ways: the standard one
// that materializes the B x B similarity matrix, and Inf-CL's tiled one (docs/design.md, "Inf-CL")
// that never holds more than a tile of it. Both are plain tensor ops, so they run wherever the
// tensors live (CPU or CUDA).
//
//   L = (L(q,k) + L(k,q)) / 2,  L(q,k) = mean_i(lse_i(x) - x_ii),  x = s q k^T,  s = exp(log_scale)
//
// The scale multiplies q before the loss (q~ = s q), so its gradient comes from <dq~, q>.
//
// In every precision the loss layer runs in float32 outside autocast, on float32 embeddings (a
// mixed-precision CLIP computes its logits in float32 too; Inf-CL's tiles fold into float32 sums).
#include <cstdint>
#include <memory>
#include <optional>

#include <torch/torch.h>

#include "core/step_choice.h"

namespace headroom::models {

class RingPeers;  // models/ring_contrastive_loss.h

// Rows of q~ per block, rows of k per column tile: the plan's choice (core/step_choice.h).
using LossTiles = core::LossTiles;

// The standard loss: x = q~ k^T in full, log-sum-exp over its rows and its columns.
torch::Tensor contrastive_loss_standard(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& log_scale);

// Inf-CL's loss: per row block of q~, column tiles of k with a running max m (from -inf) and a
// running sum l per row and per column; lse = m + log l. Keeps q~, k and the two lse vectors (2B
// floats) for backward, which recomputes each tile's logits. Tiles need not divide B. Throws
// std::invalid_argument for non-positive tiles or mismatched shapes.
torch::Tensor contrastive_loss_tiled(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& log_scale,
                                     LossTiles tiles);

// The backward of Inf-CL's tiles, for the tiled loss (kb = all of k) and for the ring (kb = the block
// passing through): each tile's logits x = q~ kt^T recomputed, P = (exp(x - lse_row) +
// exp(x - lse_col)) per_lse, dq~ += P kt, dkb += P^T q~. lse_cols and dkb are kb's.
void accumulate_tile_gradients(const torch::Tensor& qs, const torch::Tensor& kb, const torch::Tensor& lse_rows,
                               const torch::Tensor& lse_cols, const torch::Tensor& per_lse, LossTiles tiles,
                               torch::Tensor& dqs, torch::Tensor& dkb);

// How a model's contrastive loss layer runs, shared between the layer and whoever drives the step
// (the executor's gradient-cache scheme). In `Loss` mode the layer computes the loss (tiled when
// `tiles` is set); in `Capture` mode it copies its micro-batch's embeddings into `cached_q/k` at
// `offset` and returns 0; in `Surrogate` mode it returns sum(q * dq) + sum(k * dk) with the cached
// embedding gradients at `offset`, whose backward hands the towers exactly those gradients.
struct ContrastiveLossSettings {
  enum class Mode { Loss, Capture, Surrogate };
  Mode mode = Mode::Loss;
  std::optional<LossTiles> tiles;
  // Data parallel: the loss runs as Inf-CL's ring over these workers (models/ring_contrastive_loss.h),
  // with `tiles`, or one tile per pair of blocks when there are none.
  RingPeers* ring = nullptr;
  std::int64_t offset = 0;
  // [B, D]: embeddings (Capture; allocated by the first capture with `cache_rows` rows) or their
  // gradients (Surrogate).
  std::int64_t cache_rows = 0;
  torch::Tensor cached_q, cached_k;
};

// Runs the loss layer's function on the towers' embeddings as `settings` says.
torch::Tensor run_contrastive_layer(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& log_scale,
                                    ContrastiveLossSettings& settings);

}  // namespace headroom::models
