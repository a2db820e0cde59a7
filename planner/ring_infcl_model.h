#pragma once
// Inf-CL's ring across data-parallel workers in the planner (the loss itself is
// models/ring_contrastive_loss.h): a worker's loss phase of the gradient-cache step. Torch-free.
//
// Each worker holds its share's embeddings and their gradients (the loss model at its own rows),
// plus the ring's blocks in flight (blocks of the largest share's rows), beyond what one process
// holds for its rows: a received block and the next one arriving, with their columns' lse (the dk
// going on takes the place of the dk one process holds). With two workers a step never holds a
// received block and the next one at once: one block. Its compute is its rows against the whole batch (its share
// of the single-process loss's B^2 time), and every step of the ring moves a block over the link:
// the k blocks while the worker computes (hidden up to the step's compute), the columns' lse and dk
// after it (exposed).
#include <cstdint>
#include <optional>
#include <vector>

#include "core/collective.h"
#include "core/step_choice.h"
#include "planner/infcl_model.h"
#include "planner/step_sequence.h"

namespace headroom::planner {

struct RingLossShape {
  std::int64_t rows = 0;           // this worker's share
  std::int64_t largest_share = 0;  // the largest block that travels
  std::int64_t global_batch = 0;
  int workers = 1;
  core::CollectiveLink link;
};

// The loss at the worker's rows as the ring tiles it (the plan's tiles, or one tile per pair of
// blocks), never wider than a block: a measured tile's line, its tile buffers scaled to that tile.
core::LayerCost ring_rows_loss(const ContrastiveLossModel& model, const RingLossShape& shape,
                               const std::optional<core::LossTiles>& tiles);

// Bytes the ring holds beyond the loss at the worker's own rows, forward and backward.
struct RingBuffers {
  std::int64_t forward = 0, backward = 0;
};
RingBuffers ring_buffer_bytes(const ContrastiveLossModel& model, std::int64_t largest_share, int workers);

// The ring's transfer time exposed past the worker's compute, forward and backward.
struct RingTime {
  std::int64_t forward_ns = 0, backward_ns = 0;
};
RingTime ring_exposed_ns(const ContrastiveLossModel& model, const RingLossShape& shape, std::int64_t fold_ns,
                         std::int64_t gradient_ns);

// The loss phase's ops on a worker, as cached_loss_ops's on one process.
std::vector<Op> ring_loss_ops(const ContrastiveLossModel& model, const RingLossShape& shape,
                              const std::optional<core::LossTiles>& tiles);

}  // namespace headroom::planner
