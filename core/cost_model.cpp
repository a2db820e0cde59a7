#include "core/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/affine_fit.h"

namespace headroom::core {

std::int64_t CostModel::Line::at(std::int64_t batch) const {
  return static_cast<std::int64_t>(std::llround(intercept + slope * static_cast<double>(batch)));
}

CostModel::CostModel(const Trace& trace) : trace_(&trace) {
  param_bytes_ = trace.param_bytes();
  const auto& xs = trace.batch_sizes;
  const auto line_of = [&](const std::vector<std::int64_t>& ys) {
    const AffineFit fit = fit_affine(xs, ys);
    return Line{fit.intercept, fit.slope};
  };

  for (const auto& layer : trace.layers) {
    std::array<std::vector<std::int64_t>, 6> fields;
    for (const auto& s : layer.samples) {
      fields[0].push_back(s.kept_bytes);
      fields[1].push_back(s.output_bytes);
      fields[2].push_back(s.fwd_transient_bytes);
      fields[3].push_back(s.bwd_transient_bytes);
      fields[4].push_back(s.fwd_retained_bytes);
      fields[5].push_back(s.bwd_retained_bytes);
    }
    std::array<Line, 6> lines;
    for (std::size_t f = 0; f < fields.size(); ++f) lines[f] = line_of(fields[f]);
    byte_lines_.push_back(lines);
    fwd_ns_.emplace_back();
    bwd_ns_.emplace_back();
    for (const auto& s : layer.samples) {
      fwd_ns_.back().push_back(s.fwd_ns);
      bwd_ns_.back().push_back(s.bwd_ns);
    }
  }

  std::vector<std::int64_t> inputs, optimizer_ns, optimizer_transient;
  for (std::size_t k = 0; k < trace.steps.size(); ++k) {
    const auto& step = trace.steps[k];
    inputs.push_back(step.input_bytes);
    optimizer_ns.push_back(step.optimizer_ns);
    optimizer_transient.push_back(step.optimizer_transient_bytes);
    std::int64_t layer_sum = 0;
    for (const auto& layer : trace.layers) layer_sum += layer.samples[k].fwd_ns + layer.samples[k].bwd_ns;
    layer_sum_ns_.push_back(std::max<std::int64_t>(layer_sum, 1));
  }
  input_line_ = line_of(inputs);
  // The optimizer's work does not depend on the batch: take the median over the samples.
  std::sort(optimizer_ns.begin(), optimizer_ns.end());
  optimizer_ns_ = optimizer_ns[optimizer_ns.size() / 2];
  optimizer_transient_bytes_ = *std::max_element(optimizer_transient.begin(), optimizer_transient.end());
  for (const auto& step : trace.steps) {
    micro_batch_ns_.push_back(std::max<std::int64_t>(step.plain_step_ns - optimizer_ns_, 1));
  }
}

std::int64_t CostModel::interpolate(const std::vector<std::int64_t>& values, std::int64_t batch) const {
  const auto& xs = trace_->batch_sizes;
  if (batch <= xs.front()) return values.front();
  if (batch >= xs.back()) {
    return static_cast<std::int64_t>(std::llround(static_cast<double>(values.back()) * static_cast<double>(batch) /
                                                  static_cast<double>(xs.back())));
  }
  const auto hi = static_cast<std::size_t>(std::upper_bound(xs.begin(), xs.end(), batch) - xs.begin());
  const std::size_t lo = hi - 1;
  const double t = static_cast<double>(batch - xs[lo]) / static_cast<double>(xs[hi] - xs[lo]);
  return static_cast<std::int64_t>(
      std::llround(static_cast<double>(values[lo]) + t * static_cast<double>(values[hi] - values[lo])));
}

LayerCost CostModel::layer(std::size_t index, std::int64_t batch) const {
  const auto& lines = byte_lines_[index];
  const auto non_negative = [](std::int64_t v) { return std::max<std::int64_t>(v, 0); };
  LayerCost cost;
  cost.fwd_ns = interpolate(fwd_ns_[index], batch);
  cost.bwd_ns = interpolate(bwd_ns_[index], batch);
  cost.kept_bytes = non_negative(lines[0].at(batch));
  cost.output_bytes = non_negative(lines[1].at(batch));
  cost.fwd_transient_bytes = non_negative(lines[2].at(batch));
  cost.bwd_transient_bytes = non_negative(lines[3].at(batch));
  cost.fwd_retained_bytes = lines[4].at(batch);
  cost.bwd_retained_bytes = lines[5].at(batch);
  return cost;
}

std::int64_t CostModel::input_bytes(std::int64_t batch) const { return std::max<std::int64_t>(input_line_.at(batch), 0); }

std::int64_t CostModel::micro_batch_ns(std::int64_t batch) const { return interpolate(micro_batch_ns_, batch); }

double CostModel::layer_time_scale(std::int64_t batch) const {
  return static_cast<double>(micro_batch_ns(batch)) / static_cast<double>(interpolate(layer_sum_ns_, batch));
}

}  // namespace headroom::core
