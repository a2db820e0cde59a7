#pragma once
// A small, valid trace built by hand for tests that need one without profiling.
#include "core/trace.h"
#include "support/layer_sample.h"

namespace headroom::testing {

inline core::Trace make_small_trace() {
  core::Trace t;
  t.model = {.name = "mlp", .config = {{"depth", "1"}, {"hidden", "8"}, {"note", "text value"}}};
  t.device = {.kind = "cpu", .name = "test cpu", .total_memory_bytes = 1LL << 34};
  t.framework = {{"torch", "1.13.0"}, {"headroom", "0.1.0"}};
  t.optimizer = {.name = "adam", .state_bytes = 800, .state_bytes_per_param = 8.0};
  t.profile = {.warmup_steps = 1, .repeats = 3, .seed = 7, .threads = 2, .recorded_at = "2026-11-22T00:00:00Z"};
  t.batch_sizes = {1, 2};
  // `per` bytes per sample kept, output and retained in forward; 16 bytes of transient on top.
  const auto sample = [](std::int64_t b, std::int64_t per) {
    return layer_sample(b, {.fwd_ns = 1000 * b,
                            .bwd_ns = 2000 * b,
                            .kept_bytes = per * b,
                            .output_bytes = per * b,
                            .fwd_transient_bytes = per * b + 16,
                            .bwd_transient_bytes = 2 * per * b,
                            .fwd_retained_bytes = per * b,
                            .bwd_retained_bytes = -per * b,
                            .bwd_inputs_held_extra_bytes = std::nullopt});
  };
  t.layers = {
      {.id = 0, .name = "fc", .kind = "linear", .block = 0, .inputs = {core::kModelInput}, .saves_inputs = {true},
       .param_bytes = 400, .samples = {sample(1, 32), sample(2, 32)}},
      {.id = 1, .name = "gelu", .kind = "gelu", .block = 0, .inputs = {0}, .saves_inputs = {true},
       .samples = {sample(1, 32), sample(2, 32)}},
      {.id = 2, .name = "loss", .kind = "loss", .block = -1, .inputs = {1, core::kTargetInput}, .saves_inputs = {false, true},
       .samples = {sample(1, 4), sample(2, 4)}},
  };
  t.steps = {{.batch = 1, .step_ns = 9000, .plain_step_ns = 8000, .optimizer_ns = 500, .optimizer_transient_bytes = 300,
              .peak_bytes = 5000, .static_bytes = 1200, .input_bytes = 40},
             {.batch = 2, .step_ns = 15000, .plain_step_ns = 14000, .optimizer_ns = 500, .optimizer_transient_bytes = 300,
              .peak_bytes = 6000, .static_bytes = 1200, .input_bytes = 80}};
  return t;
}

// The same trace with a Tempo pass: the gelu layer's Tempo variant keeps an eighth of its input's
// bytes (output kept by the loss anyway, plus a 1-byte mask) and releases its input.
inline core::Trace make_small_tempo_trace() {
  core::Trace t = make_small_trace();
  core::TempoProfile tempo{.saves_inputs = {false}, .keeps_output = true, .samples = t.layers[1].samples};
  for (auto& s : tempo.samples) {
    s.fwd_ns += 100;
    s.bwd_ns += 300;
    s.kept_bytes /= 8;
    s.fwd_retained_bytes -= t.layers[0].samples[static_cast<std::size_t>(s.batch - 1)].output_bytes;
  }
  t.layers[1].tempo = tempo;
  t.tempo_steps = t.steps;
  for (auto& step : t.tempo_steps) step.peak_bytes -= 16;
  return t;
}

// The same trace as if it had been recorded on a GPU: device properties and GPU measurements on
// every sample and step.
inline core::Trace make_small_cuda_trace() {
  core::Trace t = make_small_trace();
  t.device = {.kind = "cuda",
              .name = "NVIDIA H100 80GB HBM3",
              .total_memory_bytes = 85'031'714'816,
              .sm_count = 132,
              .host_to_device_bytes_per_s = 2.4e10,
              .device_to_host_bytes_per_s = 2.5e10};
  for (auto& layer : t.layers) {
    for (auto& s : layer.samples) {
      s.gpu = core::GpuLayerCost{.fwd_kernel_ns = s.fwd_ns / 2,
                                 .fwd_kernel_span_ns = s.fwd_ns / 2 + 100,
                                 .fwd_kernels = 2,
                                 .bwd_kernel_ns = s.bwd_ns / 2,
                                 .bwd_kernel_span_ns = s.bwd_ns / 2 + 200,
                                 .bwd_kernels = 3,
                                 .fwd_reserved_bytes = 2 << 20,
                                 .bwd_reserved_bytes = 4 << 20};
    }
  }
  for (auto& step : t.steps) {
    step.gpu = core::GpuStepCost{.kernel_ns = step.step_ns / 2,
                                 .unattributed_kernel_ns = 1000,
                                 .peak_reserved_bytes = 8 << 20,
                                 .device_malloc_bytes = 2 << 20};
  }
  return t;
}

// The small trace profiled at `sizes`: each layer's samples its first one's, at each size, with
// `set(layer, k, sample)` filling in what the test measures; one step per size.
template <typename Set>
void resample(core::Trace& trace, const std::vector<std::int64_t>& sizes, const Set& set) {
  trace.batch_sizes = sizes;
  for (auto& layer : trace.layers) {
    const auto first = layer.samples.front();
    layer.samples.clear();
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      auto s = first;
      s.batch = sizes[k];
      set(layer, k, s);
      layer.samples.push_back(s);
    }
  }
  auto step = trace.steps.front();
  trace.steps.clear();
  for (const auto b : sizes) {
    step.batch = b;
    trace.steps.push_back(step);
  }
}

}  // namespace headroom::testing
