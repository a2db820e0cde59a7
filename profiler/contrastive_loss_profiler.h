#pragma once
// Measures a contrastive model's loss layer alone (docs/design.md, "Inf-CL") on given embeddings at
// batch sizes past the towers' profiled micro-batches: the standard loss, the tiled loss per tile
// and the gradient cache's surrogate, each forward and backward with the allocator hook and a clock.
#include <cstdint>
#include <functional>
#include <optional>

#include <torch/torch.h>

#include "core/contrastive_profile.h"
#include "models/model.h"

namespace headroom::profiler {

// The model's contrastive loss layer, or -1.
int contrastive_loss_layer(const models::Model& model);

struct ContrastiveProfileOptions {
  // Standard loss (memory quadratic: at least three sizes), tiles and the batches each is measured
  // at (affine: two, each at least the tile), surrogate sizes (two).
  std::vector<std::int64_t> standard_batches{256, 512, 1024, 2048};
  std::vector<core::LossTiles> tiles{{256, 256}, {1024, 1024}, {4096, 4096}};
  std::vector<std::int64_t> tile_batch_multiples{2, 3, 4};
  std::vector<std::int64_t> surrogate_batches{256, 512, 1024};
  int repeats = 3;
  // Called after each sample with its batch (minutes in all at the largest tiles on a CPU).
  std::function<void(std::int64_t batch)> on_sample;

  // How many samples `profile_contrastive_loss` takes.
  int sample_count() const {
    return static_cast<int>(standard_batches.size() + tiles.size() * tile_batch_multiples.size() + surrogate_batches.size());
  }
};

// Throws std::invalid_argument for a model without a contrastive loss layer.
core::ContrastiveProfile profile_contrastive_loss(const models::Model& model, torch::Device device,
                                                  const ContrastiveProfileOptions& options);

}  // namespace headroom::profiler
