#pragma once
// A small, valid trace built by hand for tests that need one without profiling.
#include "core/trace.h"

namespace headroom::testing {

inline core::Trace make_small_trace() {
  core::Trace t;
  t.model = {"mlp", {{"depth", "1"}, {"hidden", "8"}, {"note", "text value"}}};
  t.device = {"cpu", "test cpu", 1LL << 34};
  t.framework = {{"torch", "1.13.0"}, {"headroom", "0.1.0"}};
  t.optimizer = {"adam", 800, 8.0};
  t.profile = {1, 3, 7, 2, "2026-11-22T00:00:00Z"};
  t.batch_sizes = {1, 2};
  const auto sample = [](std::int64_t b, std::int64_t per) {
    return core::LayerSample{{1000 * b, 2000 * b, per * b, per * b, per * b + 16, 2 * per * b, per * b, -per * b}, b, std::nullopt};
  };
  t.layers = {
      {0, "fc", "linear", 0, {core::kModelInput}, {true}, 400, {sample(1, 32), sample(2, 32)}, std::nullopt},
      {1, "gelu", "gelu", 0, {0}, {true}, 0, {sample(1, 32), sample(2, 32)}, std::nullopt},
      {2, "loss", "loss", -1, {1, core::kTargetInput}, {false, true}, 0, {sample(1, 4), sample(2, 4)}, std::nullopt},
  };
  t.steps = {{1, 9000, 8000, 500, 300, 5000, 1200, 40, std::nullopt}, {2, 15000, 14000, 500, 300, 6000, 1200, 80, std::nullopt}};
  return t;
}

// The same trace with a Tempo pass: the gelu layer's lean variant keeps an eighth of its input's
// bytes (output kept by the loss anyway, plus a 1-byte mask) and releases its input.
inline core::Trace make_small_tempo_trace() {
  core::Trace t = make_small_trace();
  core::LeanProfile lean{{false}, true, t.layers[1].samples};
  for (auto& s : lean.samples) {
    s.fwd_ns += 100;
    s.bwd_ns += 300;
    s.kept_bytes /= 8;
    s.fwd_retained_bytes -= t.layers[0].samples[static_cast<std::size_t>(s.batch - 1)].output_bytes;
  }
  t.layers[1].tempo = lean;
  t.tempo_steps = t.steps;
  for (auto& step : t.tempo_steps) step.peak_bytes -= 16;
  return t;
}

// The same trace as if it had been recorded on a GPU: device properties and GPU measurements on
// every sample and step.
inline core::Trace make_small_cuda_trace() {
  core::Trace t = make_small_trace();
  t.device = {"cuda", "NVIDIA H100 80GB HBM3", 85'031'714'816, 132, 2.4e10, 2.5e10};
  for (auto& layer : t.layers) {
    for (auto& s : layer.samples) {
      s.gpu = core::GpuLayerCost{s.fwd_ns / 2, s.fwd_ns / 2 + 100, 2, s.bwd_ns / 2, s.bwd_ns / 2 + 200, 3,
                                 2 << 20, 4 << 20};
    }
  }
  for (auto& step : t.steps) step.gpu = core::GpuStepCost{step.step_ns / 2, 1000, 8 << 20, 2 << 20};
  return t;
}

}  // namespace headroom::testing
