#pragma once
// A synthetic trace for planner tests and benchmarks.
#include <string>


#include "core/trace.h"

namespace headroom::testing {

// A chain of `layers` layers grouped in blocks of 4, with affine bytes and sub-linear times, and no
// layers after the last block.
inline core::Trace synthetic_chain(int layers) {
  core::Trace t;
  t.model = {"chain", {}};
  t.device = {"cpu", "synthetic", 1LL << 40};
  t.optimizer = {"adam", 8LL * layers * 4096, 8.0};
  t.profile = {1, 1, 0, 1, ""};
  t.batch_sizes = {1, 2, 4, 8};
  for (int i = 0; i < layers; ++i) {
    core::LayerProfile l;
    l.id = i;
    l.name = "layer" + std::to_string(i);
    l.kind = i % 4 == 0 ? "linear" : "gelu";
    l.block = i / 4;
    l.inputs = {i == 0 ? core::kModelInput : i - 1};
    l.saves_inputs = {true};
    l.param_bytes = i % 4 == 0 ? 4LL * 4096 : 0;
    for (const std::int64_t b : t.batch_sizes) {
      const std::int64_t act = 4096 * b * (1 + i % 3);
      l.samples.push_back({{1000 + 300 * b, 2000 + 600 * b, act, act, act, 2 * act, act, -act}, b, std::nullopt});
    }
    t.layers.push_back(l);
  }
  for (const std::int64_t b : t.batch_sizes) {
    t.steps.push_back({b, 0, layers * (3000 + 900 * b), 10000, 4096, 0, 2 * 4LL * 4096 * (layers / 4), 16 * b, std::nullopt});
  }
  return t;
}

}  // namespace headroom::testing
