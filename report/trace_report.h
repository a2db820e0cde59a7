#pragma once
// What `headroom profile` prints: the per-layer table and the per-batch step summary.
#include <string>

#include "core/trace.h"

namespace headroom::report {

// One row per layer: params, kept bytes per sample (the slope of an affine fit over the sampled
// batch sizes), kept bytes and forward/backward time at the largest sampled batch.
std::string render_layer_table(const core::Trace& trace);

// One row per sampled batch: profiled and plain step time, profiler overhead, optimizer time,
// measured peak and the static part of it.
std::string render_step_table(const core::Trace& trace);

// Traces with a Tempo pass only (else empty): per kind of Tempo layer at the largest sampled batch,
// the bytes the Tempo variants stop keeping and their forward+backward time against the standard
// layers'; per batch, the measured peak and plain step time of the standard and the all-Tempo step.
std::string render_tempo_table(const core::Trace& trace);

// The host<->device copy link the trace measured (what times L2L's copies), one line:
// "copies host->device 9.80 GB/s + 501 ns each, device->host ..."; empty where it measured none.
std::string describe_copy_link(const core::DeviceInfo& device);
// "calibration at 2 threads: matrix product 61.2 GFLOP/s, convolution 48.0 GFLOP/s, memory 9.8 GB/s (5 runs, spread 3%)"
std::string describe_calibration(const core::Calibration& calibration);

// CUDA traces only: the device (memory, SMs, measured pinned copy bandwidth) and, per layer at the
// largest sampled batch, CUPTI's kernel time next to the layer's wall time, kernel counts and the
// caching allocator's reserve. Empty for a CPU trace.
std::string render_gpu_table(const core::Trace& trace);

}  // namespace headroom::report
