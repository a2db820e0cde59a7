#include "planner/ring_infcl_model.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "core/saturating.h"
#include "planner/plan_search.h"
#include "planner/technique.h"

namespace headroom::planner {

namespace {

// One block of `bytes` from a worker to the next.
std::int64_t transfer_ns(std::int64_t bytes, const core::CollectiveLink& link) {
  return core::transfer_ns(bytes, link.bytes_per_second, link.latency_ns);
}

std::int64_t scaled_within_int64(std::int64_t ns, double f) { return std::llround(std::min(static_cast<double>(ns) * f, 9e18)); }

}  // namespace

// The loss at this worker's rows as the ring tiles it: the plan's tiles, or one tile per pair of
// blocks without them, and never more than a block's rows either way. A tile's measured memory is
// affine in the batch (infcl_model.h): a part that grows with the rows and the tile buffers; the
// buffers are scaled to the tile the ring really uses (from the measured tile given, or the
// smallest measured one).
core::LayerCost ring_rows_loss(const ContrastiveLossModel& model, const RingLossShape& shape,
                          const std::optional<core::LossTiles>& tiles) {
  core::LossTiles measured{0, 0};
  if (tiles) {
    measured = *tiles;
  } else {
    for (const auto& t : model.tiles()) {
      if (measured.rows == 0 || t.rows * t.cols < measured.rows * measured.cols) measured = t;
    }
    if (measured.rows == 0) return model.loss(shape.rows, std::nullopt);  // no tiles measured: the standard fit
  }
  const std::int64_t rows = std::min(measured.rows, shape.rows), cols = std::min(measured.cols, shape.largest_share);
  const std::int64_t used_rows = tiles ? rows : shape.rows, used_cols = tiles ? cols : shape.largest_share;
  const double area = static_cast<double>(used_rows) * static_cast<double>(used_cols) /
                      (static_cast<double>(measured.rows) * static_cast<double>(measured.cols));
  if (area == 1.0) return model.loss(shape.rows, measured);
  // Two points of the line (at the rows and twice them) give the part that grows and the buffers.
  const core::LayerCost at = model.loss(shape.rows, measured), twice = model.loss(2 * shape.rows, measured);
  core::LayerCost cost = at;
  const auto rescale = [&](std::int64_t a, std::int64_t b) {
    const std::int64_t grows = b - a;  // slope times the rows
    const std::int64_t buffers = a - grows;
    return grows + static_cast<std::int64_t>(std::ceil(static_cast<double>(buffers) * area));
  };
  cost.fwd_transient_bytes = std::max<std::int64_t>(0, rescale(at.fwd_transient_bytes, twice.fwd_transient_bytes));
  cost.bwd_transient_bytes = std::max<std::int64_t>(0, rescale(at.bwd_transient_bytes, twice.bwd_transient_bytes));
  return cost;
}

RingBuffers ring_buffer_bytes(const ContrastiveLossModel& model, std::int64_t largest_share, int workers) {
  if (workers <= 1) return {};
  const std::int64_t block = model.embedding_bytes(largest_share), lse = largest_share * 4;
  // Two workers: step 0 folds the worker's own block while the other's arrives; step 1 folds that
  // one and sends it home. More: a middle step holds a received block and the next one. Backward
  // the dk going on takes the place of the dk one process holds, and its successor is made once the
  // step's tiles are gone: the loss alone measured one block and three lse vectors above one process
  // at its rows with two workers, two and four with three (D = 512, 4096 rows, tiles of 256 and
  // 1024; D = 32 with 1024 tiles needed one and two lse fewer).
  const std::int64_t blocks = workers == 2 ? 1 : 2;
  return {blocks * (block + lse), blocks * block + (blocks + 2) * lse};
}

RingTime ring_exposed_ns(const ContrastiveLossModel& model, const RingLossShape& shape, std::int64_t fold_ns,
                         std::int64_t gradient_ns) {
  RingTime t;
  const int n = shape.workers;
  if (n <= 1) return t;
  const std::int64_t block = model.embedding_bytes(shape.largest_share), lse = shape.largest_share * 4;
  const std::int64_t keys = transfer_ns(block, shape.link), lses = transfer_ns(lse, shape.link),
                     grads = transfer_ns(block, shape.link);
  // Per ring step: the k block travels while the worker computes; its lse (forward) or dk
  // (backward) goes once the step's compute has finished with it; the last step sends them home.
  const std::int64_t fold_step = fold_ns / n, gradient_step = gradient_ns / n;
  t.forward_ns = (n - 1) * std::max<std::int64_t>(0, keys - fold_step) + n * lses;
  t.backward_ns = (n - 1) * std::max<std::int64_t>(0, std::max(keys, lses) - gradient_step) + n * grads;
  // The shares' all-gather before, the loss's all-reduce after.
  t.forward_ns = core::saturating_add(t.forward_ns, 2 * core::ring_allreduce_ns(8 * n, n, shape.link));
  return t;
}

std::vector<Op> ring_loss_ops(const ContrastiveLossModel& model, const RingLossShape& shape,
                              const std::optional<core::LossTiles>& tiles) {
  // Memory: what the loss holds at this worker's rows (embeddings, lse, gradients, tiles).
  const core::LayerCost c = ring_rows_loss(model, shape, tiles);
  const RingBuffers ring = ring_buffer_bytes(model, shape.largest_share, shape.workers);
  // Time: its rows against every column, the single-process loss's time over the whole batch in
  // proportion, and what the ring's transfers add.
  // Without tiles the ring's tiles are a block's rows: the time of the whole loss measured with the
  // largest measured tile stands for it (tiles change the time little: docs/results.md, "Inf-CL").
  std::optional<core::LossTiles> timed = tiles;
  if (!timed && !model.tiles().empty()) timed = model.tiles().back();
  const core::LayerCost whole = model.loss(shape.global_batch, timed);
  const double share = static_cast<double>(shape.rows) / static_cast<double>(shape.global_batch);
  const std::int64_t fold = scaled_within_int64(whole.fwd_ns, share), gradient = scaled_within_int64(whole.bwd_ns, share);
  const RingTime exposed = ring_exposed_ns(model, shape, fold, gradient);
  return {{OpKind::Forward, model.layer(), core::saturating_add(fold, exposed.forward_ns),
           core::saturating_add(c.fwd_transient_bytes, ring.forward), c.fwd_retained_bytes},
          {OpKind::Backward, model.layer(), core::saturating_add(gradient, exposed.backward_ns),
           core::saturating_add(c.bwd_transient_bytes, ring.backward), c.bwd_retained_bytes},
          {OpKind::GradientCache, -1, 0, 0, -(c.fwd_retained_bytes + c.bwd_retained_bytes)}};
}

namespace {

// The ring loss as a technique: asked for by nothing but the request's workers and the model's
// contrastive loss. The planner sets it wherever both are (a worker's loss over its own share alone
// would not be the global batch's loss), the step sequence runs the loss phase as the ring's
// (ring_loss_ops), and the executor runs it over the workers' process group (executor/ring_peers.h).
class RingLoss final : public Technique {
 public:
  bool used_by(const core::StepChoice& choice) const override { return choice.ring_loss; }
  void open(SearchSpace& space, const core::Trace& trace, const LayerGraph&, const PlanRequest& request) const override {
    space.base.ring_loss = request.workers > 1 && has_contrastive_loss(trace);
  }
  void check(const CheckedChoice& c) const override {
    const bool contrastive = has_contrastive_loss(c.trace);
    if (!used_by(c.choice)) {
      if (c.choice.data_parallel && contrastive) {
        throw core::InputError(c.source + ": $.ring_loss: a data-parallel plan of a contrastive model runs its loss as "
                               "Inf-CL's ring across the workers, and this one does not say so (made by an older "
                               "headroom?): plan again");
      }
      return;
    }
    if (!c.choice.data_parallel) {
      throw core::InputError(c.source + ": $.ring_loss: the ring runs across data-parallel workers; the plan has one");
    }
    if (!contrastive) throw core::InputError(c.source + ": $.ring_loss: the trace's model has no contrastive loss to run as a ring");
  }
};

}  // namespace

const Technique& ring_loss_technique() {
  static const RingLoss technique;
  return technique;
}

}  // namespace headroom::planner
