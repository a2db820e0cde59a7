#include "planner/device_error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/units.h"
#include "planner/step_sequence.h"

namespace headroom::planner {

DeviceError worst_device_error(const core::CostModel& costs, const LayerGraph& graph) {
  DeviceError worst;
  for (const auto& step : costs.trace().steps) {
    const std::int64_t predicted = predict_step(costs, graph, core::StepChoice{}.with_micro_batches({step.batch})).peak_bytes;
    const std::int64_t measured = step.gpu ? std::max(step.peak_bytes, step.gpu->peak_reserved_bytes) : step.peak_bytes;
    if (predicted <= 0 || measured <= predicted) continue;
    const double fraction = static_cast<double>(measured - predicted) / static_cast<double>(predicted);
    if (fraction > worst.fraction) worst = {fraction, step.batch, predicted, measured};
  }
  return worst;
}

std::string margin_warning(double margin_fraction, const DeviceError& error) {
  if (error.fraction <= margin_fraction) return {};
  char text[512];
  // The margin that covers it, rounded up to a tenth of a percent.
  const double needed = std::ceil(error.fraction * 1000) / 10;
  std::snprintf(text, sizeof text,
                "the margin (%.1f%%) is below the worst error measured on this trace's device (%.2f%%: a step of %lld "
                "was predicted at %s and held %s): the plan may not fit; use --margin %.1f%% or more",
                100 * margin_fraction, 100 * error.fraction, static_cast<long long>(error.batch),
                core::format_bytes(error.predicted_bytes).c_str(), core::format_bytes(error.measured_bytes).c_str(), needed);
  return text;
}

}  // namespace headroom::planner
