#pragma once
// How far a trace's own measurements exceed what the planner predicts for them. The prediction
// counts every byte the model allocates (an upper bound on the CPU); what it cannot count is the
// device's: on CUDA the caching allocator reserves more than it hands out (fragmentation, rounding),
// and the reserve is what runs out. A plan's safety margin must cover that error, so a margin below
// it gets a warning naming it.
#include <cstdint>
#include <string>

#include "core/cost_model.h"
#include "planner/layer_graph.h"

namespace headroom::planner {

struct DeviceError {
  double fraction = 0;  // (measured - predicted) / predicted, 0 when no measurement exceeds its prediction
  std::int64_t batch = 0;
  std::int64_t predicted_bytes = 0;
  std::int64_t measured_bytes = 0;  // the step's peak; on CUDA the reserve's
};

// The worst over the trace's profiled batches, each predicted as one micro-batch of that size.
DeviceError worst_device_error(const core::CostModel& costs, const LayerGraph& graph);

// A warning when `margin_fraction` does not cover `error`, empty when it does.
std::string margin_warning(double margin_fraction, const DeviceError& error);

}  // namespace headroom::planner
