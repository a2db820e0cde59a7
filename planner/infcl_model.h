#pragma once
// Inf-CL in the planner (docs/design.md, "Inf-CL"): the contrastive loss's memory and time at any
// batch size and tile, fitted from the trace's measurements of the loss alone, and the
// gradient-cache step a contrastive model runs when its towers are micro-batched. Torch-free.
//
// The step of n > 1 micro-batches of a contrastive model (executor/grad_cache.cpp runs it):
//   1. the embedding cache ([B, D] per tower) and every micro-batch's RNG state are allocated;
//   2. each micro-batch's towers run without grad, their embeddings copied into the cache;
//   3. the loss over the whole batch, standard or tiled, leaves the embeddings' gradients (the
//      embeddings go);
//   4. each micro-batch runs again with its RNG state, its towers backpropagated from the cached
//      gradients (the loss layer is a surrogate that hands them over), checkpointing as planned;
//   5. the cache goes, the optimizer steps.
// With one micro-batch the step is the plain one, the loss layer at its modelled cost.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/step_choice.h"
#include "core/trace.h"
#include "planner/layer_graph.h"
#include "planner/step_sequence.h"

namespace headroom::planner {

class ContrastiveLossModel {
 public:
  // The profile must have passed the trace reader's checks.
  explicit ContrastiveLossModel(const core::ContrastiveProfile& profile);

  int layer() const { return layer_; }
  // The loss over `batch` pairs as a layer cost: the standard loss without tiles. Memory: the
  // standard loss's quadratic through its three largest samples (the B x B logits, exponentials
  // and gradient), a tile's affine line through its two largest (tile buffers plus O(B) vectors).
  // Time: the nearest sample at or below `batch` scaled by (batch / sampled)^2.
  core::LayerCost loss(std::int64_t batch, const std::optional<core::LossTiles>& tiles) const;
  // The gradient cache's surrogate loss over a micro-batch: affine in memory and time.
  core::LayerCost surrogate(std::int64_t batch) const;
  // The tiles the trace measured, in its order.
  const std::vector<core::LossTiles>& tiles() const { return tiles_; }
  bool measured(const core::LossTiles& tiles) const;
  // One tower's embeddings (or their gradients) for `batch` pairs, fp32.
  std::int64_t embedding_bytes(std::int64_t batch) const { return batch * dim_ * 4; }

 private:
  int layer_ = -1;
  std::int64_t dim_ = 0;
  std::vector<core::LossTiles> tiles_;
  std::vector<core::ContrastiveSample> samples_;
};

// Step 2 for one micro-batch: every layer up to the loss runs without grad, holding its transient
// and the outputs still to be read; the loss layer copies the embeddings into the cache. Nothing
// stays. Times scaled as micro_batch_ops scales them.
std::vector<Op> embedding_ops(const BatchCosts& costs, const LayerGraph& graph, int loss_layer);

// Step 3: the loss over the whole batch and what it leaves (the embeddings' gradients replace the
// embeddings in the cache: the level returns to where it was).
std::vector<Op> cached_loss_ops(const ContrastiveLossModel& model, std::int64_t global_batch,
                                const std::optional<core::LossTiles>& tiles);

// The gradient cache's own allocation: both towers' [B, D] embeddings, and an RNG state per
// micro-batch plus the one set aside while they run again.
std::int64_t gradient_cache_bytes(const ContrastiveLossModel& model, std::int64_t global_batch, std::size_t micro_batches,
                                  std::int64_t rng_state_bytes);

// The plan's line saying how a contrastive model's step runs (gradient cache, loss tiles); empty
// for another model.
std::string contrastive_scheme(const core::Trace& trace, const core::StepChoice& choice);

// The trace's loss model, or nothing for a model without a contrastive loss.
std::optional<ContrastiveLossModel> contrastive_loss_model(const core::Trace& trace);

}  // namespace headroom::planner
