#pragma once
// A synthetic trace for planner tests and benchmarks.
#include <string>

#include "core/trace.h"
#include "support/layer_sample.h"

namespace headroom::testing {

// A chain of `layers` layers grouped in blocks of 4, with affine bytes and sub-linear times, and no
// layers after the last block.
inline core::Trace synthetic_chain(int layers) {
  core::Trace t;
  t.model = {.name = "chain"};
  t.device = {.kind = "cpu", .name = "synthetic", .total_memory_bytes = 1LL << 40};
  t.optimizer = {.name = "adam", .state_bytes = 8LL * layers * 4096, .state_bytes_per_param = 8.0};
  t.profile = {.warmup_steps = 1, .repeats = 1, .seed = 0, .threads = 1};
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
      l.samples.push_back(layer_sample(b, {.fwd_ns = 1000 + 300 * b,
                                           .bwd_ns = 2000 + 600 * b,
                                           .kept_bytes = act,
                                           .output_bytes = act,
                                           .fwd_transient_bytes = act,
                                           .bwd_transient_bytes = 2 * act,
                                           .fwd_retained_bytes = act,
                                           .bwd_retained_bytes = -act,
                                           .bwd_inputs_held_extra_bytes = std::nullopt}));
    }
    t.layers.push_back(l);
  }
  for (const std::int64_t b : t.batch_sizes) {
    t.steps.push_back({.batch = b,
                       .plain_step_ns = layers * (3000 + 900 * b),
                       .optimizer_ns = 10000,
                       .optimizer_transient_bytes = 4096,
                       .static_bytes = 2 * 4LL * 4096 * (layers / 4),
                       .input_bytes = 16 * b});
  }
  return t;
}

}  // namespace headroom::testing
