#pragma once
// A trace's measurements evaluated at any micro-batch size. Memory is affine in batch size
// (DESIGN.md), so every byte count comes from a least-squares line through the samples (exact at
// the sampled sizes). Time is not: small batches under-use the device, so times are interpolated
// piecewise-linearly between samples, held flat below the smallest sample and extended
// proportionally above the largest (a saturated device scales linearly).
#include <array>
#include <cstdint>
#include <vector>

#include "core/trace.h"

namespace headroom::core {

struct LayerCost {
  std::int64_t fwd_ns = 0;
  std::int64_t bwd_ns = 0;
  std::int64_t kept_bytes = 0;
  std::int64_t output_bytes = 0;
  std::int64_t fwd_transient_bytes = 0;
  std::int64_t bwd_transient_bytes = 0;
  std::int64_t fwd_retained_bytes = 0;
  std::int64_t bwd_retained_bytes = 0;
};

class CostModel {
 public:
  explicit CostModel(const Trace& trace);

  const Trace& trace() const { return *trace_; }
  std::size_t layer_count() const { return trace_->layers.size(); }

  LayerCost layer(std::size_t index, std::int64_t batch) const;

  // Parameters, gradients and optimizer state: allocated once, independent of batch size.
  std::int64_t param_bytes() const { return param_bytes_; }
  std::int64_t gradient_bytes() const { return param_bytes_; }
  std::int64_t optimizer_state_bytes() const { return trace_->optimizer.state_bytes; }
  std::int64_t static_bytes() const { return 2 * param_bytes_ + trace_->optimizer.state_bytes; }

  std::int64_t input_bytes(std::int64_t batch) const;
  std::int64_t optimizer_ns() const { return optimizer_ns_; }
  std::int64_t optimizer_transient_bytes() const { return optimizer_transient_bytes_; }

  // Time of one micro-batch's forward and backward as a plain (unprofiled) step runs it: the
  // trace's plain step time minus its optimizer time. Layer times from the profiled run are
  // scaled to add up to this, so predictions match unprofiled training.
  std::int64_t micro_batch_ns(std::int64_t batch) const;
  // micro_batch_ns / the sum of profiled layer times, at `batch`.
  double layer_time_scale(std::int64_t batch) const;

 private:
  struct Line {
    double intercept = 0, slope = 0;
    std::int64_t at(std::int64_t batch) const;
  };
  std::int64_t interpolate(const std::vector<std::int64_t>& values, std::int64_t batch) const;

  const Trace* trace_;
  std::int64_t param_bytes_ = 0;
  std::int64_t optimizer_ns_ = 0;
  std::int64_t optimizer_transient_bytes_ = 0;
  // Per layer, the fitted lines for each byte field (kept, output, fwd/bwd transient, fwd/bwd retained).
  std::vector<std::array<Line, 6>> byte_lines_;
  std::vector<std::vector<std::int64_t>> fwd_ns_, bwd_ns_;  // per layer, per sample
  Line input_line_;
  std::vector<std::int64_t> micro_batch_ns_;  // per sample
  std::vector<std::int64_t> layer_sum_ns_;    // per sample
};

}  // namespace headroom::core
