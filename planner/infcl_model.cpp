#include "planner/infcl_model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/errors.h"
#include "core/saturating.h"
#include "planner/plan_search.h"
#include "planner/technique.h"

namespace headroom::planner {

namespace {

using core::ContrastiveMode;
using core::ContrastiveSample;

using Field = std::int64_t ContrastiveSample::*;
constexpr Field kMemoryFields[] = {&ContrastiveSample::fwd_transient_bytes, &ContrastiveSample::fwd_retained_bytes,
                                   &ContrastiveSample::bwd_transient_bytes, &ContrastiveSample::bwd_retained_bytes};

// Held at the trace's limit so sums stay in 64 bits.
std::int64_t clamp_bytes(double v) {
  return static_cast<std::int64_t>(std::clamp(std::ceil(v - 1e-6), -static_cast<double>(core::kMaxTraceBytes),
                                              static_cast<double>(core::kMaxTraceBytes)));
}
std::int64_t clamp_ns(double v) { return std::llround(std::clamp(v, 0.0, static_cast<double>(core::kMaxTraceNs))); }

// The polynomial through the points (x_i, y_i) (two: a line, three: a parabola), at x.
double through(const std::vector<const ContrastiveSample*>& points, Field field, std::int64_t x) {
  double sum = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    double term = static_cast<double>(points[i]->*field);
    for (std::size_t j = 0; j < points.size(); ++j) {
      if (j == i) continue;
      term *= static_cast<double>(x - points[j]->batch) / static_cast<double>(points[i]->batch - points[j]->batch);
    }
    sum += term;
  }
  return sum;
}

// The `count` largest distinct batch sizes among `samples`, ascending.
std::vector<const ContrastiveSample*> largest(const std::vector<const ContrastiveSample*>& samples, std::size_t count) {
  std::vector<const ContrastiveSample*> sorted = samples;
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->batch < b->batch; });
  sorted.erase(std::unique(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->batch == b->batch; }),
               sorted.end());
  if (sorted.size() > count) sorted.erase(sorted.begin(), sorted.end() - static_cast<std::ptrdiff_t>(count));
  return sorted;
}

// Time: the largest sample at or below `batch` (else the smallest), scaled by (batch / its batch)^power.
core::LayerCost timed(const std::vector<const ContrastiveSample*>& samples, std::int64_t batch, double power) {
  const ContrastiveSample* near = nullptr;
  for (const auto* s : samples) {
    if (s->batch <= batch && (near == nullptr || s->batch > near->batch)) near = s;
  }
  if (near == nullptr) {
    for (const auto* s : samples) {
      if (near == nullptr || s->batch < near->batch) near = s;
    }
  }
  const double f = std::pow(static_cast<double>(batch) / static_cast<double>(near->batch), power);
  core::LayerCost cost;
  cost.fwd_ns = clamp_ns(static_cast<double>(near->fwd_ns) * f);
  cost.bwd_ns = clamp_ns(static_cast<double>(near->bwd_ns) * f);
  return cost;
}

// Memory through the largest samples by a polynomial of `degree`, raised by the most it falls
// short of any other sample (a bound: the samples stray from the line by a few bytes,
// docs/design.md, "Inf-CL"); time scaled by `time_power`.
core::LayerCost fitted(const std::vector<const ContrastiveSample*>& samples, std::int64_t batch, std::size_t degree,
                       double time_power) {
  const auto points = largest(samples, degree + 1);
  if (points.size() < degree + 1) throw std::logic_error("contrastive loss model: too few samples");
  core::LayerCost cost = timed(samples, batch, time_power);
  std::int64_t* out[] = {&cost.fwd_transient_bytes, &cost.fwd_retained_bytes, &cost.bwd_transient_bytes,
                         &cost.bwd_retained_bytes};
  for (std::size_t f = 0; f < 4; ++f) {
    double short_by = 0;
    for (const auto* s : samples) {
      short_by = std::max(short_by, static_cast<double>(s->*kMemoryFields[f]) - through(points, kMemoryFields[f], s->batch));
    }
    *out[f] = clamp_bytes(through(points, kMemoryFields[f], batch) + short_by);
  }
  // A transient is never negative, whatever a fit below the samples says.
  cost.fwd_transient_bytes = std::max<std::int64_t>(cost.fwd_transient_bytes, 0);
  cost.bwd_transient_bytes = std::max<std::int64_t>(cost.bwd_transient_bytes, 0);
  cost.kept_bytes = cost.fwd_retained_bytes;
  return cost;
}

}  // namespace

ContrastiveLossModel::ContrastiveLossModel(const core::ContrastiveProfile& profile)
    : layer_(profile.layer), dim_(profile.dim), samples_(profile.samples) {
  for (const auto& s : samples_) {
    if (s.mode != ContrastiveMode::Tiled) continue;
    const core::LossTiles t{s.tile_rows, s.tile_cols};
    if (std::find(tiles_.begin(), tiles_.end(), t) == tiles_.end()) tiles_.push_back(t);
  }
}

bool ContrastiveLossModel::measured(const core::LossTiles& tiles) const {
  return std::find(tiles_.begin(), tiles_.end(), tiles) != tiles_.end();
}

core::LayerCost ContrastiveLossModel::loss(std::int64_t batch, const std::optional<core::LossTiles>& tiles) const {
  std::vector<const ContrastiveSample*> picked;
  for (const auto& s : samples_) {
    const bool match = tiles ? s.mode == ContrastiveMode::Tiled && s.tile_rows == tiles->rows && s.tile_cols == tiles->cols
                             : s.mode == ContrastiveMode::Standard;
    if (match) picked.push_back(&s);
  }
  if (picked.empty()) throw std::invalid_argument("the trace measured no contrastive loss with these tiles");
  return fitted(picked, batch, tiles ? 1 : 2, 2.0);
}

core::LayerCost ContrastiveLossModel::surrogate(std::int64_t batch) const {
  std::vector<const ContrastiveSample*> picked;
  for (const auto& s : samples_) {
    if (s.mode == ContrastiveMode::Surrogate) picked.push_back(&s);
  }
  return fitted(picked, batch, 1, 1.0);
}

std::vector<Op> embedding_ops(const BatchCosts& costs, const LayerGraph& graph, int loss_layer) {
  std::vector<Op> ops;
  for (int i = 0; i <= loss_layer; ++i) {
    std::int64_t live = 0;
    for (int j = 0; j < i; ++j) {
      if (graph.last_reader(j) >= i) live += costs.layers[static_cast<std::size_t>(j)].output_bytes;
    }
    const auto& c = costs.layers[static_cast<std::size_t>(i)];
    // The capture copies into the cache: only its scalar result is new.
    const std::int64_t transient = i == loss_layer ? c.output_bytes : c.fwd_transient_bytes;
    ops.push_back({OpKind::ForwardNoGrad, i,
                   std::llround(std::min(static_cast<double>(c.fwd_ns) * costs.scale, static_cast<double>(core::kMaxTraceNs))),
                   live + transient, 0});
  }
  return ops;
}

std::vector<Op> cached_loss_ops(const ContrastiveLossModel& model, std::int64_t global_batch,
                                const std::optional<core::LossTiles>& tiles) {
  const core::LayerCost c = model.loss(global_batch, tiles);
  return {{OpKind::Forward, model.layer(), c.fwd_ns, c.fwd_transient_bytes, c.fwd_retained_bytes},
          {OpKind::Backward, model.layer(), c.bwd_ns, c.bwd_transient_bytes, c.bwd_retained_bytes},
          {OpKind::GradientCache, -1, 0, 0, -(c.fwd_retained_bytes + c.bwd_retained_bytes)}};
}

std::int64_t gradient_cache_bytes(const ContrastiveLossModel& model, std::int64_t global_batch, std::size_t micro_batches,
                                  std::int64_t rng_state_bytes) {
  return 2 * model.embedding_bytes(global_batch) + static_cast<std::int64_t>(micro_batches + 1) * rng_state_bytes;
}

std::string contrastive_scheme(const core::Trace& trace, const core::StepChoice& choice) {
  if (!trace.contrastive_loss) return {};
  const std::int64_t batch = choice.samples();
  // Below fp32 the loss still runs in float32, outside autocast (models/contrastive_loss.h).
  const std::string in_float32 = trace.precision != core::Precision::Fp32 ? ", in float32" : "";
  const std::string loss = (choice.loss_tiles ? "tiled " + std::to_string(choice.loss_tiles->rows) + " x " +
                                                    std::to_string(choice.loss_tiles->cols) + " (Inf-CL)"
                                              : std::string("standard (the full B x B similarity matrix)")) +
                           in_float32;
  if (choice.ring_loss) {
    return "contrastive step: gradient cache on each of " + std::to_string(choice.workers()) +
           " workers over its share's micro-batches, the loss over all " + std::to_string(batch) +
           " pairs once as Inf-CL's ring (key blocks passed worker to worker, partial lse merged, dk accumulated round "
           "the ring); loss " +
           (choice.loss_tiles ? loss : "one tile per pair of blocks" + in_float32);
  }
  if (choice.micro_batches.size() <= 1) return "contrastive step: one batch of " + std::to_string(batch) + "; loss " + loss;
  return "contrastive step: gradient cache over " + std::to_string(choice.micro_batches.size()) +
         " micro-batches (embeddings without grad, the loss over all " + std::to_string(batch) +
         " pairs once, each micro-batch again backpropagating its cached embedding gradients); loss " + loss;
}

std::optional<ContrastiveLossModel> contrastive_loss_model(const core::Trace& trace) {
  if (!trace.contrastive_loss) return std::nullopt;
  return ContrastiveLossModel(*trace.contrastive_loss);
}

namespace {

// Inf-CL as a technique: a contrastive loss tiled as the trace measured it; the step sequence runs it
// (under a gradient cache where the step splits the batch), and the plan says how the step runs.
class InfCl final : public Technique {
 public:
  std::optional<Strategy> strategy() const override { return Strategy::InfCl; }
  bool used_by(const core::StepChoice& choice) const override { return choice.loss_tiles.has_value(); }
  // A contrastive model's loss options: the standard loss, and the measured tiles that fit the batch
  // where Inf-CL is asked for.
  void open(SearchSpace& space, const core::Trace& trace, const LayerGraph&, const PlanRequest& request) const override {
    const auto loss = contrastive_loss_model(trace);
    if (!loss) return;
    space.loss_options.push_back(std::nullopt);
    if (!request.strategies.contains(Strategy::InfCl)) return;
    for (const auto& tiles : loss->tiles()) {
      if (tiles.rows <= request.global_batch && tiles.cols <= request.global_batch) space.loss_options.push_back(tiles);
    }
  }
  void check(const CheckedChoice& c) const override {
    if (!used_by(c.choice)) return;
    if (!c.trace.contrastive_loss) {
      throw core::InputError(c.source + ": $.loss_tiles: the trace's model has no contrastive loss to tile");
    }
    const ContrastiveLossModel loss(*c.trace.contrastive_loss);
    const core::LossTiles& tiles = *c.choice.loss_tiles;
    if (!loss.measured(tiles)) {
      std::string measured;
      for (const auto& t : loss.tiles()) measured += (measured.empty() ? "" : ", ") + std::to_string(t.rows) + "x" + std::to_string(t.cols);
      throw core::InputError(c.source + ": $.loss_tiles: the trace measured no " + std::to_string(tiles.rows) + "x" +
                             std::to_string(tiles.cols) + " tile (measured: " + measured + ")");
    }
  }
  void explain(const ChosenStep& step, std::vector<std::string>& warnings) const override {
    if (std::string scheme = contrastive_scheme(step.trace, step.choice); !scheme.empty()) warnings.push_back(std::move(scheme));
  }
};

}  // namespace

const Technique& infcl_technique() {
  static const InfCl technique;
  return technique;
}

}  // namespace headroom::planner
