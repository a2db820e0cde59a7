#pragma once
// GradCache for a contrastive model (Gao et al.; docs/design.md, "Inf-CL"): its towers micro-batched
// while the loss sees the whole batch, so the gradient is the full batch's exactly. The step the
// planner models (planner/infcl_model.h):
//   1. every micro-batch's towers without grad, its embeddings copied into a [B, D] cache per
//      tower, the RNG state saved before each;
//   2. the loss over the whole cache (standard or tiled), leaving the embeddings' gradients;
//   3. every micro-batch again with its RNG state restored (dropout draws the same masks),
//      backpropagated from its rows of the cached gradients, checkpointing as planned.
#include <cstdint>
#include <functional>

#include "executor/plan_runner.h"
#include "models/model.h"

namespace headroom::executor {

// The model's contrastive loss layer, or -1.
int contrastive_layer(const models::Model& model);

// Runs steps 1-3 for `count` micro-batches (`batch_of(m)` makes micro-batch m, called twice per
// micro-batch) of `rows` samples in all; gradients accumulate into the parameters. Returns the loss
// over the whole batch. A data-parallel worker passes its share: its cache holds its rows, the loss
// layer runs the ring over every worker's (models/ring_contrastive_loss.h), and
// `before_last_backward` (when set) runs before the last micro-batch's backward, where the
// gradients' exchange is armed.
double grad_cache_accumulate(const models::Model& model, PlanRunner& runner, std::size_t count,
                             const std::function<models::Batch(std::size_t)>& batch_of, std::int64_t rows,
                             torch::Device device, const std::function<void()>& before_last_backward = {});

}  // namespace headroom::executor
