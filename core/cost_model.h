#pragma once
// A trace's measurements evaluated at any micro-batch size. Memory is affine in batch size
// (docs/design.md, "Fits") between samples, but not always across all of them (oneDNN picks other
// convolution algorithms for tiny batches), so byte counts are piecewise-linear through the
// samples, exact at every sampled size and extended along the end segments. A transient (scratch memory) may stray from that line at
// sizes no profile ran (oneDNN's convolutions at two threads), so between samples it gets, on top,
// what a jump in a segment steeper than the layer's cost per sample can add (cost_model.cpp,
// segment_slack): zero for a layer whose bytes are a line. A transient allocated in blocks of
// samples (bfloat16 matrix products' backward scratch, blocks of 4) is, between samples, what it is
// at the next multiple of its block (staircase_block), and where one matrix product's backward
// shows a block every product's backward is held to it. Time is not affine: small batches use
// the device less, so times are interpolated piecewise-linearly between samples, held flat below the
// smallest sample, and extended past the largest along the line through the last two samples (a
// fixed cost plus a cost per sample; a proportional extension overstated a CPU step 4 samples past
// the last one by 2x). Past the largest sample a time is a guess: plans that go there say so. A
// value extended that far past the trace's limits (kMaxTraceBytes, kMaxTraceNs) is held at the
// limit, so sums over layers stay in 64 bits.
#include <array>
#include <optional>
#include <cstdint>
#include <vector>

#include "core/trace.h"

namespace headroom::core {


class CostModel {
 public:
  // How a transient's bytes are read between the profiled sizes. Bound: with its segment's slack
  // and its block, so that a plan never counts on less than may run there. Line: on the line
  // through the profiled sizes around it, what runs where no kernel's scratch steps between them,
  // against which a plan says how much of its peak is the bound's (core/unprofiled_sizes.h).
  enum class Between { Bound, Line };
  explicit CostModel(const Trace& trace, Between between = Between::Bound);

  const Trace& trace() const { return *trace_; }
  std::size_t layer_count() const { return trace_->layers.size(); }

  LayerCost layer(std::size_t index, std::int64_t batch) const;
  // The layer's Tempo variant (the trace's Tempo profile of it); the standard cost where it has none.
  LayerCost tempo_layer(std::size_t index, std::int64_t batch) const;
  bool has_tempo_variant(std::size_t index) const { return tempo_layers_[index].has_value(); }
  // The layer as a checkpointed block of its own (the trace's checkpointed pass), where measured.
  std::optional<CheckpointedSample> checkpointed_layer(std::size_t index, std::int64_t batch) const;
  bool has_checkpointed_layers() const { return has_checkpointed_; }
  // The blocks of samples some transient is allocated in (staircase_block), ascending; between two
  // multiples of each below the last profiled size, between profiled sizes, and past the last, every
  // byte count is affine in the batch.
  const std::vector<std::int64_t>& blocks() const { return blocks_; }

  // Parameters, gradients and optimizer state: allocated once, independent of batch size. Only
  // trainable parameters have gradients (and optimizer state, which the trace measured as such).
  std::int64_t param_bytes() const { return param_bytes_; }
  std::int64_t gradient_bytes() const { return gradient_bytes_; }
  std::int64_t optimizer_state_bytes() const { return trace_->optimizer.state_bytes; }
  std::int64_t model_extra_bytes() const { return trace_->model_extra_bytes; }
  std::int64_t workspace_bytes() const { return trace_->workspace_bytes; }
  std::int64_t static_bytes() const {
    return param_bytes_ + gradient_bytes_ + trace_->optimizer.state_bytes + trace_->model_extra_bytes + trace_->workspace_bytes;
  }

  std::int64_t input_bytes(std::int64_t batch) const;
  // What a step pays once, whatever its micro-batches: the optimizer step, and in traces that
  // measured steps as sequences (StepSequence) also zeroing the gradients and what the step's first
  // micro-batch costs beyond a later one (caches the optimizer evicted). The median over the batch
  // sizes. The schedule's optimizer task carries all of it, so a step charges it exactly once.
  std::int64_t optimizer_ns() const { return optimizer_ns_; }
  std::int64_t optimizer_transient_bytes() const { return optimizer_transient_bytes_; }
  std::int64_t checkpoint_state_bytes() const { return trace_->checkpoint_state_bytes; }

  // Time of one micro-batch's forward and backward as the executor runs the micro-batches after a
  // step's first: the trace's StepSequence::micro_batch_ns (its data made, the loss weighted,
  // gradients accumulating, no profiler hooks). Traces without sequences: the profiled step minus
  // its own optimizer step (medians at that batch size), not the plain step minus a median optimizer
  // time: where the optimizer dominates, that difference of two noisy numbers is far off
  // (docs/design.md, "How a plan is made"). Layer times are scaled to add up to this, taking in
  // the glue between layers.
  std::int64_t micro_batch_ns(std::int64_t batch) const;
  // micro_batch_ns / layer_sum_ns, at `batch`.
  double layer_time_scale(std::int64_t batch) const;
  // The sum of every layer's profiled forward and backward times, at `batch` (at least 1).
  std::int64_t layer_sum_ns(std::int64_t batch) const;

 private:
  // Piecewise-linear through the samples; past the last one along the last segment (for times, a
  // segment that slopes down is held flat). Unrounded: callers round it into their range.
  double interpolate(const std::vector<std::int64_t>& values, std::int64_t batch, bool never_falls) const;

  const Trace* trace_;
  std::int64_t param_bytes_ = 0;
  std::int64_t gradient_bytes_ = 0;
  std::int64_t optimizer_ns_ = 0;
  std::int64_t optimizer_transient_bytes_ = 0;
  // One layer's samples as series over the batch sizes.
  struct Series {
    // kept, output, fwd/bwd transient, fwd/bwd retained, and the backward's transient with its inputs
    // held (empty where the samples do not measure it)
    std::array<std::vector<std::int64_t>, 7> bytes;
    std::array<std::vector<double>, 7> slack;  // per segment between samples; transients only
    std::array<std::int64_t, 7> block{1, 1, 1, 1, 1, 1, 1};  // staircase_block; transients only
    std::vector<std::int64_t> fwd_ns, bwd_ns;
  };
  static Series series_of(const std::vector<std::int64_t>& batch_sizes, const std::vector<LayerSample>& samples);
  // Gives every matrix-product layer's backward transients the largest block any of them shows.
  void share_the_products_block();
  LayerCost evaluate(const Series& series, std::int64_t batch) const;
  // A transient's bytes at `batch`: interpolated, with its segment slack, read as its block says.
  double transient_at(const std::vector<std::int64_t>& bytes, const std::vector<double>& slack, std::int64_t block,
                      std::int64_t batch) const;

  std::vector<Series> layers_;
  std::vector<std::optional<Series>> tempo_layers_;
  // Per layer: recompute transient, recompute extra, backward transient over the batch sizes.
  struct CheckpointedSeries {
    std::array<std::vector<std::int64_t>, 3> bytes;
    std::array<std::vector<double>, 3> slack;  // the transients'
    std::array<std::int64_t, 3> block{1, 1, 1};  // the transients'
  };
  std::vector<std::optional<CheckpointedSeries>> checkpointed_;
  bool has_checkpointed_ = false;
  std::vector<std::int64_t> blocks_;
  std::vector<std::int64_t> input_bytes_;
  std::vector<std::int64_t> micro_batch_ns_;  // per sample
  std::vector<std::int64_t> layer_sum_ns_;    // per sample
};

}  // namespace headroom::core
