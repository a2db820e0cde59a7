#include "core/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/rescale.h"
#include "core/transient_jumps.h"

namespace headroom::core {

namespace {

// Rounds an interpolated value, held within [lo, hi].
std::int64_t rounded(double value, std::int64_t lo, std::int64_t hi) {
  return std::llround(std::clamp(value, static_cast<double>(lo), static_cast<double>(hi)));
}

std::int64_t rounded_bytes(double value) { return rounded(value, -kMaxTraceBytes, kMaxTraceBytes); }
std::int64_t rounded_ns(double value) { return rounded(value, 0, kMaxTraceNs); }

// The slope of `values` over the segment from xs[k] to xs[k + 1].
double slope_of(const std::vector<std::int64_t>& xs, const std::vector<std::int64_t>& values, std::size_t k) {
  return static_cast<double>(values[k + 1] - values[k]) / static_cast<double>(xs[k + 1] - xs[k]);
}

// The median of `slopes` (not empty), reordering them.
double median_slope(std::vector<double>& slopes) {
  std::sort(slopes.begin(), slopes.end());
  return slopes[(slopes.size() - 1) / 2];
}

// What a transient may hold beyond the line between two profiled sizes, per segment between them.
// A layer's scratch memory is not always a line in the batch: oneDNN's convolution backward holds
// a few KiB more at some batch sizes than at others (clip's image.conv2), so the line through two
// profiled sizes can be under the sizes between (docs/design.md, "Fits"; docs/results.md, "Peaks
// between profiled sizes"). Such a jump shows as a segment steeper than the layer's cost per sample, taken as the
// median slope of the segments with sizes inside them (batch 1 runs other kernels: the segment from
// 1 to 2 neither sets the slope nor gets slack). The segment's excess over its width is the jump J;
// whatever size inside it the jump comes at, the bytes there are at most the start's plus the slope
// plus J, which is the line plus J times the distance still to go to the segment's end
// (slack_at). A flatter segment gets nothing (the cnn's batch-2 kernels hold more a sample; the
// sizes inside came out at or under the line), nor does a layer whose bytes are a line, nor a
// profiled size: that value is measured.
std::vector<double> segment_slack(const std::vector<std::int64_t>& xs, const std::vector<std::int64_t>& values) {
  std::vector<double> slack(xs.size() > 1 ? xs.size() - 1 : 0, 0.0);
  std::vector<double> slopes;
  for (std::size_t k = 0; k < slack.size(); ++k) {
    if (xs[k + 1] - xs[k] > 1) slopes.push_back(slope_of(xs, values, k));
  }
  if (slopes.size() < 2) return slack;
  const double per_sample = median_slope(slopes);
  for (std::size_t k = 0; k < slack.size(); ++k) {
    slack[k] = std::max(0.0, (slope_of(xs, values, k) - per_sample) * static_cast<double>(xs[k + 1] - xs[k]));
  }
  return slack;
}

// The slack at `batch` inside its segment; nothing at a profiled size or outside them.
double slack_at(const std::vector<std::int64_t>& xs, const std::vector<double>& slack, std::int64_t batch) {
  if (slack.empty() || batch <= xs.front() || batch >= xs.back()) return 0;
  const auto hi = static_cast<std::size_t>(std::upper_bound(xs.begin(), xs.end(), batch) - xs.begin());
  const std::size_t lo = hi - 1;
  if (xs[lo] == batch) return 0;
  return slack[lo] * static_cast<double>(xs[hi] - batch) / static_cast<double>(xs[hi] - xs[lo]);
}

// Whether `values` (over the profiled sizes) never fall from one size to the next.
bool never_falls(const std::vector<std::int64_t>& values) { return std::is_sorted(values.begin(), values.end()); }

// The block of samples a transient is allocated in, where it is: bfloat16 matrix products' backward
// scratch grows in blocks of 4 samples (clip's text.layer0.attn_out; docs/design.md, "Fits"). At
// profiled sizes that are multiples of the block such a staircase lies on a line, which is under it
// at the sizes between, and segment_slack sees no jump. What gives it away is the flat run it starts with: the same bytes
// at the first sizes, then a rise that goes on at the slope of the later segments. The block is the
// last size of that run; between samples the transient is then what it is at the next multiple of
// the block (or at the next profiled size, if that comes first), a bound for anything that never
// falls with the batch, and the block is taken only for a transient that does not fall at any
// profiled size. Returns 1 for a transient flat throughout or with no such run, for a single rise
// after it (nothing to check it against: the embeddings' backward on CUDA holds the same bytes at
// its first profiled sizes, then more at the last), and for a rise out of line with the later segments (a constant
// scratch overtaken by one that grows with the batch, where the line between samples is already
// above it).
std::int64_t staircase_block(const std::vector<std::int64_t>& xs, const std::vector<std::int64_t>& values) {
  const std::size_t n = xs.size();
  if (!never_falls(values)) return 1;
  std::size_t flat_end = 0;
  while (flat_end + 1 < n && values[flat_end + 1] == values.front()) ++flat_end;
  if (flat_end == 0 || flat_end + 1 == n) return 1;
  std::vector<double> later;
  for (std::size_t k = flat_end + 1; k + 1 < n; ++k) later.push_back(slope_of(xs, values, k));
  if (later.empty()) return 1;
  const double per_sample = median_slope(later);
  if (std::abs(slope_of(xs, values, flat_end) - per_sample) > 0.05 * per_sample) return 1;
  return xs[flat_end];
}

// Where a transient allocated in blocks of `block` samples is read for `batch` among the profiled
// sizes: the next multiple of the block, or the next profiled size where that comes first, and at
// a profiled size that size, whose bytes are measured (a product that shares another's block need
// not step: its bytes at 1 are not its bytes at 4). Constant from one multiple of the block to the
// next (planner/split_bounds.h cuts its ranges there). Past the last profiled size, the size itself
// (CostModel::transient_at adds the block's allowance there instead).
std::int64_t blocked_batch(const std::vector<std::int64_t>& xs, std::int64_t batch, std::int64_t block) {
  if (block == 1 || batch > xs.back() || std::binary_search(xs.begin(), xs.end(), batch)) return batch;
  const std::int64_t multiple = (batch + block - 1) / block * block;
  return std::min(multiple, *std::upper_bound(xs.begin(), xs.end(), batch));
}

}  // namespace

CostModel::CostModel(const Trace& trace, Between between) : trace_(&trace) {
  param_bytes_ = trace.param_bytes();
  gradient_bytes_ = trace.trainable_param_bytes();

  for (const auto& layer : trace.layers) {
    layers_.push_back(series_of(trace.batch_sizes, layer.samples));
    tempo_layers_.push_back(layer.tempo ? std::optional<Series>(series_of(trace.batch_sizes, layer.tempo->samples)) : std::nullopt);
    checkpointed_.emplace_back();
    if (layer.checkpointed.empty()) continue;
    has_checkpointed_ = true;
    auto& series = checkpointed_.back().emplace();
    for (const auto& c : layer.checkpointed) {
      series.bytes[0].push_back(c.recompute_transient_bytes);
      series.bytes[1].push_back(c.recompute_extra_bytes);
      series.bytes[2].push_back(c.bwd_transient_bytes);
    }
    for (const std::size_t field : {0, 2}) {
      series.slack[field] = segment_slack(trace.batch_sizes, series.bytes[field]);
      series.block[field] = staircase_block(trace.batch_sizes, series.bytes[field]);
    }
  }
  if (between == Between::Bound) {
    share_the_products_block();
  } else {
    const auto on_the_line = [](auto& series) {
      for (auto& slack : series.slack) std::fill(slack.begin(), slack.end(), 0.0);
      series.block.fill(1);
    };
    for (auto& series : layers_) on_the_line(series);
    for (auto& series : tempo_layers_) {
      if (series) on_the_line(*series);
    }
    for (auto& series : checkpointed_) {
      if (series) on_the_line(*series);
    }
  }

  std::vector<std::int64_t> inputs, optimizer_transient;
  for (std::size_t k = 0; k < trace.steps.size(); ++k) {
    const auto& step = trace.steps[k];
    inputs.push_back(step.input_bytes);
    optimizer_transient.push_back(step.optimizer_transient_bytes);
    std::int64_t layer_sum = 0;
    for (const auto& layer : trace.layers) layer_sum += layer.samples[k].fwd_ns + layer.samples[k].bwd_ns;
    layer_sum_ns_.push_back(std::max<std::int64_t>(layer_sum, 1));
  }
  input_bytes_ = inputs;
  optimizer_transient_bytes_ = *std::max_element(optimizer_transient.begin(), optimizer_transient.end());
  // The trace reader guarantees sequences for every step or for none.
  const bool sequences = trace.steps.front().sequence.has_value();
  std::vector<std::int64_t> once_per_step;
  for (const auto& step : trace.steps) {
    if (sequences) {
      const StepSequence& q = *step.sequence;
      micro_batch_ns_.push_back(std::max<std::int64_t>(q.micro_batch_ns, 1));
      // Signed: a first micro-batch measured faster than the later ones takes its difference off.
      once_per_step.push_back(step.optimizer_ns + q.zero_grad_ns + (q.first_micro_batch_ns - q.micro_batch_ns));
    } else {
      micro_batch_ns_.push_back(std::max<std::int64_t>(step.step_ns - step.optimizer_ns, 1));
      once_per_step.push_back(step.optimizer_ns);
    }
  }
  // What a step pays once does not depend on the batch: take the median over the samples.
  std::sort(once_per_step.begin(), once_per_step.end());
  optimizer_ns_ = std::max<std::int64_t>(once_per_step[once_per_step.size() / 2], 0);
}

void CostModel::share_the_products_block() {
  // The rows a matrix-product kernel tiles its scratch in are the kernel's, not one layer's: clip's
  // bf16 text layers all step in blocks of 4 samples, but only attn_out's transient shows it (its
  // flat run at the first sizes), while ffn_out's and qkv's lie on lines at the profiled sizes and
  // were under between them, and so was the whole step (docs/results.md, "Peaks between profiled
  // sizes"). So where one
  // product's backward transient shows a block, every product's backward transients are bounded at
  // the next multiple of it; a product whose scratch does not step is then predicted less than a
  // block's worth of samples on along its line. The contrastive loss is not such a kernel: its
  // float32 logits grow with the square of the batch.
  const auto steps_with_the_products = [&](std::size_t i) {
    const std::string& kind = trace_->layers[i].kind;
    return is_matrix_product_kind(kind) && kind != "contrastive_loss";
  };
  // The backward's transients: the forward's do not step (under bf16-autocast clip's forward
  // transients grow on lines, and held to the block they came out over: docs/design.md, "Fits").
  // Only those measured (the inputs-held one is not in older traces) and never falling, where the
  // next multiple's bytes bound a size's.
  const auto for_each_backward_block = [&](std::size_t i, const auto& visit) {
    const auto visit_if = [&](const std::vector<std::int64_t>& bytes, std::int64_t& block) {
      if (!bytes.empty() && never_falls(bytes)) visit(block);
    };
    for (const std::size_t field : {3, 6}) visit_if(layers_[i].bytes[field], layers_[i].block[field]);
    if (tempo_layers_[i]) {
      for (const std::size_t field : {3, 6}) visit_if(tempo_layers_[i]->bytes[field], tempo_layers_[i]->block[field]);
    }
    if (checkpointed_[i]) visit_if(checkpointed_[i]->bytes[2], checkpointed_[i]->block[2]);
  };
  std::int64_t products_block = 1;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (steps_with_the_products(i)) for_each_backward_block(i, [&](std::int64_t b) { products_block = std::max(products_block, b); });
  }
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (steps_with_the_products(i)) for_each_backward_block(i, [&](std::int64_t& b) { b = std::max(b, products_block); });
  }
  // Every block in use, for the planner's ranges.
  const auto note = [&](std::int64_t b) {
    if (b > 1 && std::find(blocks_.begin(), blocks_.end(), b) == blocks_.end()) blocks_.push_back(b);
  };
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    for (const std::int64_t b : layers_[i].block) note(b);
    if (tempo_layers_[i]) {
      for (const std::int64_t b : tempo_layers_[i]->block) note(b);
    }
    if (checkpointed_[i]) {
      for (const std::int64_t b : checkpointed_[i]->block) note(b);
    }
  }
  std::sort(blocks_.begin(), blocks_.end());
}

double CostModel::interpolate(const std::vector<std::int64_t>& values, std::int64_t batch, bool never_falls) const {
  const auto& xs = trace_->batch_sizes;
  const std::size_t n = xs.size();
  if (n == 1) {
    // One sample: bytes in proportion to the batch; times too above it, but held flat below it
    // (smaller batches under-use the device), so splitting never looks free.
    if (never_falls && batch <= xs.back()) return static_cast<double>(values.back());
    return static_cast<double>(values.back()) * static_cast<double>(batch) / static_cast<double>(xs.back());
  }
  if (batch < xs.front()) {
    // Times are held flat below the smallest sample (small batches under-use the device); bytes
    // go on along the first segment.
    if (never_falls) return static_cast<double>(values.front());
    const double slope = static_cast<double>(values[1] - values[0]) / static_cast<double>(xs[1] - xs[0]);
    return static_cast<double>(values[0]) - slope * static_cast<double>(xs[0] - batch);
  }
  if (batch >= xs.back()) {
    double slope = static_cast<double>(values[n - 1] - values[n - 2]) / static_cast<double>(xs[n - 1] - xs[n - 2]);
    // A noisy pair of times can slope down; time never falls with more samples.
    if (never_falls) slope = std::max(0.0, slope);
    return static_cast<double>(values.back()) + slope * static_cast<double>(batch - xs.back());
  }
  const auto hi = static_cast<std::size_t>(std::upper_bound(xs.begin(), xs.end(), batch) - xs.begin());
  const std::size_t lo = hi - 1;
  const double t = static_cast<double>(batch - xs[lo]) / static_cast<double>(xs[hi] - xs[lo]);
  return static_cast<double>(values[lo]) + t * static_cast<double>(values[hi] - values[lo]);
}

double CostModel::transient_at(const std::vector<std::int64_t>& bytes, const std::vector<double>& slack, std::int64_t block,
                               std::int64_t batch) const {
  const auto& xs = trace_->batch_sizes;
  const std::int64_t b = blocked_batch(xs, batch, block);
  double value = interpolate(bytes, b, false) + slack_at(xs, slack, b);
  if (block > 1 && batch > xs.back() && xs.size() > 1) {
    // Past the last size, the line through the last two (multiples of the block, both: the block
    // is a profiled size and the later segments are on a line) plus what a block adds above it at
    // most: affine, so the planner's last range needs no cuts however large the batch.
    value += std::max(0.0, slope_of(xs, bytes, xs.size() - 2)) * static_cast<double>(block - 1);
  }
  return value;
}

CostModel::Series CostModel::series_of(const std::vector<std::int64_t>& batch_sizes, const std::vector<LayerSample>& samples) {
  Series out;
  for (const auto& s : samples) {
    out.bytes[0].push_back(s.kept_bytes);
    out.bytes[1].push_back(s.output_bytes);
    out.bytes[2].push_back(s.fwd_transient_bytes);
    out.bytes[3].push_back(s.bwd_transient_bytes);
    out.bytes[4].push_back(s.fwd_retained_bytes);
    out.bytes[5].push_back(s.bwd_retained_bytes);
    out.fwd_ns.push_back(s.fwd_ns);
    out.bwd_ns.push_back(s.bwd_ns);
  }
  const bool held = std::all_of(samples.begin(), samples.end(),
                                [](const LayerSample& s) { return s.bwd_inputs_held_extra_bytes.has_value(); });
  if (held) {
    for (const auto& s : samples) out.bytes[6].push_back(s.bwd_transient_bytes + *s.bwd_inputs_held_extra_bytes);
  }
  for (const std::size_t field : {2, 3, 6}) {
    if (out.bytes[field].empty()) continue;
    out.slack[field] = segment_slack(batch_sizes, out.bytes[field]);
    out.block[field] = staircase_block(batch_sizes, out.bytes[field]);
  }
  return out;
}

LayerCost CostModel::evaluate(const Series& series, std::int64_t batch) const {
  // Only the transients have slack and blocks; slack_at is 0 for the other fields' empty ones, and
  // their block is 1.
  const auto at = [&](std::size_t field) {
    return rounded_bytes(transient_at(series.bytes[field], series.slack[field], series.block[field], batch));
  };
  const auto non_negative = [](std::int64_t v) { return std::max<std::int64_t>(v, 0); };
  LayerCost cost;
  cost.fwd_ns = rounded_ns(interpolate(series.fwd_ns, batch, true));
  cost.bwd_ns = rounded_ns(interpolate(series.bwd_ns, batch, true));
  cost.kept_bytes = non_negative(at(0));
  cost.output_bytes = non_negative(at(1));
  cost.fwd_transient_bytes = non_negative(at(2));
  cost.bwd_transient_bytes = non_negative(at(3));
  cost.fwd_retained_bytes = at(4);
  cost.bwd_retained_bytes = at(5);
  // Interpolated as a transient of its own, so it bounds the held peak between samples as the
  // transient bounds the plain one; never below it.
  if (!series.bytes[6].empty()) cost.bwd_inputs_held_extra_bytes = std::max<std::int64_t>(at(6) - cost.bwd_transient_bytes, 0);
  return cost;
}

LayerCost CostModel::layer(std::size_t index, std::int64_t batch) const { return evaluate(layers_[index], batch); }

LayerCost CostModel::tempo_layer(std::size_t index, std::int64_t batch) const {
  const auto& tempo = tempo_layers_[index];
  return tempo ? evaluate(*tempo, batch) : layer(index, batch);
}

std::optional<CheckpointedSample> CostModel::checkpointed_layer(std::size_t index, std::int64_t batch) const {
  const auto& series = checkpointed_[index];
  if (!series) return std::nullopt;
  const auto at = [&](std::size_t field) {
    return std::max<std::int64_t>(rounded_bytes(transient_at(series->bytes[field], series->slack[field], series->block[field], batch)), 0);
  };
  return CheckpointedSample{batch, at(0), at(1), at(2)};
}

std::int64_t CostModel::input_bytes(std::int64_t batch) const {
  return rounded(interpolate(input_bytes_, batch, false), 0, kMaxTraceBytes);
}

std::int64_t CostModel::micro_batch_ns(std::int64_t batch) const {
  return rounded(interpolate(micro_batch_ns_, batch, true), 1, kMaxTraceNs);
}

std::int64_t CostModel::layer_sum_ns(std::int64_t batch) const {
  // The sum of every layer's times, up to kMaxTraceLayers * 2 * kMaxTraceNs.
  return rounded(interpolate(layer_sum_ns_, batch, true), 1, std::int64_t{1} << 62);
}

double CostModel::layer_time_scale(std::int64_t batch) const {
  return static_cast<double>(micro_batch_ns(batch)) / static_cast<double>(layer_sum_ns(batch));
}

// Beside the cost model, so that what it bounds and what is located are one notion: the same
// transients, the same slack.
std::vector<TransientJump> transient_jumps(const Trace& trace) {
  const auto& xs = trace.batch_sizes;
  // One per segment, xs[k] to xs[k + 1]; those with no size inside or no jump are dropped at the end.
  std::vector<TransientJump> jumps;
  for (std::size_t k = 0; k + 1 < xs.size(); ++k) jumps.push_back({xs[k], xs[k + 1], 0, {}, {}});
  const auto consider = [&](const std::vector<std::int64_t>& values, const std::string& layer, const std::string& what) {
    if (values.size() != xs.size()) return;
    const std::vector<double> slack = segment_slack(xs, values);
    // A step: the next segment is back at (or near) the layer's cost per sample, where this one was
    // above it. Bytes that grow ever faster (the standard contrastive loss's B x B logits) make each
    // segment steeper than the last, and halving them would never end; nor can a step be told in
    // the last segment, with nothing after it.
    for (std::size_t k = 0; k + 2 < xs.size(); ++k) {
      if (slack[k] <= 0) continue;
      const double per_sample = slope_of(xs, values, k) - slack[k] / static_cast<double>(xs[k + 1] - xs[k]);
      if (slope_of(xs, values, k + 1) - per_sample > 0.25 * (slope_of(xs, values, k) - per_sample)) continue;
      const auto bytes = static_cast<std::int64_t>(std::ceil(slack[k]));
      if (bytes > jumps[k].bytes) jumps[k] = {xs[k], xs[k + 1], bytes, layer, what};
    }
  };
  const auto samples = [&](const std::vector<LayerSample>& of, const std::string& layer, const std::string& variant) {
    std::vector<std::int64_t> fwd, bwd, held;
    for (const auto& s : of) {
      fwd.push_back(s.fwd_transient_bytes);
      bwd.push_back(s.bwd_transient_bytes);
      if (s.bwd_inputs_held_extra_bytes) held.push_back(s.bwd_transient_bytes + *s.bwd_inputs_held_extra_bytes);
    }
    consider(fwd, layer, variant + "forward scratch");
    consider(bwd, layer, variant + "backward scratch");
    consider(held, layer, variant + "backward scratch with its inputs held");
  };
  for (const auto& layer : trace.layers) {
    samples(layer.samples, layer.name, "");
    if (layer.tempo) samples(layer.tempo->samples, layer.name, "Tempo ");
    std::vector<std::int64_t> recompute, bwd;
    for (const auto& c : layer.checkpointed) {
      recompute.push_back(c.recompute_transient_bytes);
      bwd.push_back(c.bwd_transient_bytes);
    }
    consider(recompute, layer.name, "recompute scratch");
    consider(bwd, layer.name, "checkpointed backward scratch");
  }
  std::erase_if(jumps, [](const TransientJump& j) { return j.bytes <= 0 || j.to_batch - j.from_batch < 2; });
  return jumps;
}

std::vector<TransientJump> jumps_worth_locating(const Trace& trace, double share, std::size_t limit) {
  std::vector<TransientJump> worth;
  for (auto& jump : transient_jumps(trace)) {
    const auto& step = trace.steps[static_cast<std::size_t>(trace.batch_index(jump.to_batch))];
    if (static_cast<double>(jump.bytes) > share * static_cast<double>(step.peak_bytes)) worth.push_back(std::move(jump));
  }
  std::stable_sort(worth.begin(), worth.end(), [](const TransientJump& a, const TransientJump& b) { return a.bytes > b.bytes; });
  if (worth.size() > limit) worth.resize(limit);
  std::sort(worth.begin(), worth.end(), [](const TransientJump& a, const TransientJump& b) { return a.from_batch < b.from_batch; });
  return worth;
}

}  // namespace headroom::core
