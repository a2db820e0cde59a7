#pragma once
// A trace sample from named costs: LayerSample extends LayerCost, and C++ designated initializers
// cannot name a base's fields, so fixtures name the costs here and add the batch.
#include <cstdint>

#include "core/trace.h"

namespace headroom::testing {

inline core::LayerSample layer_sample(std::int64_t batch, const core::LayerCost& cost) {
  core::LayerSample sample;
  static_cast<core::LayerCost&>(sample) = cost;
  sample.batch = batch;
  return sample;
}

}  // namespace headroom::testing
