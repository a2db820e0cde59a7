#include "planner/optimizer_estimate.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "core/optimizer_spec.h"

namespace headroom::planner {

double optimizer_state_bytes_per_param(const std::string& optimizer) {
  // SGD with momentum keeps one float32 buffer per parameter, without none; Adam two moments,
  // three with amsgrad.
  return 4.0 * core::parse_optimizer_spec(optimizer).state_buffers();
}

core::Trace with_estimated_optimizer(const core::Trace& trace, const std::string& optimizer) {
  const double per_param = optimizer_state_bytes_per_param(optimizer);
  core::Trace out = trace;
  const core::OptimizerSpec spec = core::parse_optimizer_spec(optimizer);
  if (spec == core::parse_optimizer_spec(trace.optimizer.name)) return out;
  const int element_bytes = core::parameter_element_bytes(trace.precision);
  // Only trainable parameters have state.
  const double elements = static_cast<double>(trace.trainable_param_bytes()) / element_bytes;
  // Under bf16 the optimizer also keeps float32 master weights, and steps them in pieces of at most
  // 2^20 elements with the gradient widened to float32 (runtime/optimizer.h).
  const bool master_weights = trace.precision == core::Precision::Bf16;
  const double kept_per_param = per_param + (master_weights ? 4.0 : 0.0);
  const auto state = static_cast<std::int64_t>(std::llround(elements * kept_per_param)) +
                     trace.optimizer.step_count_bytes(spec.text());
  const std::int64_t state_change = state - trace.optimizer.state_bytes;
  std::int64_t largest_layer_params = 0;
  for (const auto& layer : trace.layers) largest_layer_params = std::max(largest_layer_params, layer.trainable_param_bytes());
  const std::int64_t largest_step_elements =
      master_weights ? std::min<std::int64_t>(largest_layer_params / element_bytes, std::int64_t{1} << 20)
                     : largest_layer_params / element_bytes;
  const std::int64_t estimated_transient = (spec.kind != core::OptimizerSpec::Kind::Sgd ? 8 * largest_step_elements : 0) +
                                           (master_weights ? 4 * largest_step_elements : 0);

  out.optimizer.name = spec.text();
  out.optimizer.state_bytes = state;
  out.optimizer.state_bytes_per_param = kept_per_param;
  // The host's rate was measured for the trace's optimizer, not this one: L2L's host lane falls back
  // to the trace's optimizer time.
  out.optimizer.host_ns_per_param = 0;
  for (auto& step : out.steps) {
    step.static_bytes += state_change;
    step.peak_bytes += state_change;
    step.optimizer_transient_bytes = std::max(step.optimizer_transient_bytes, estimated_transient);
  }
  return out;
}

std::string estimated_optimizer_warning(const core::Trace& trace, const std::string& optimizer) {
  return "optimizer state estimated, not measured: profile with --optimizer " + optimizer +
         " to measure it (the trace measured " + trace.optimizer.name + "; its step time is used for " + optimizer + ")";
}

}  // namespace headroom::planner
