#pragma once
// Runs a model at several micro-batch sizes and records, per layer, forward and backward time and
// the memory it keeps for backward, outputs and needs transiently (docs/design.md, "The numbers that
// matter"). Forward work is attributed by running layer by layer; backward work by the autograd
// sequence numbers that a forward op shares with its backward node.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/cost_model.h"
#include "core/trace.h"
#include "models/model.h"
#include "profiler/gpu/activity.h"
#include "profiler/gpu/backend.h"
#include "runtime/memory_recorder.h"

namespace headroom::profiler {

struct Progress {
  std::string phase;  // "inputs", "warmup", "plain", "profile"; "tempo ..." for the Tempo pass
  std::int64_t batch = 0;
  // Once, with the first report of a size profiled beyond those asked for: why.
  std::string note;
  int step = 0;   // steps done overall
  int total = 0;  // steps overall
};

// What CUPTI recorded in one profiled CUDA step, for timelines (profile --chrome).
struct GpuStepRecord {
  gpu::ActivityLog log;
  gpu::RangeTable ranges;
  std::uint64_t origin_ns = 0;  // the step's start on the records' clock
  gpu::StepAttribution attribution;
};

struct ProfileOptions {
  std::vector<std::int64_t> batch_sizes{1, 2, 4, 8};
  std::string optimizer = "adam";  // "sgd" (momentum 0.9) or "adam"
  std::string device = "cpu";
  int warmup_steps = 1;  // at least 1: the first step allocates the optimizer's state
  int repeats = 5;       // timed steps per batch size, with and without the profiler's hooks
  // After every size is profiled, rounds of one plain step at every size, for as many seconds as
  // this (at most core::kMaxTimingSeconds; 0: none): each size's times are then the machine's over
  // all of them, not over the tenths of a second a shared machine runs at one speed. The trace
  // records it.
  double timing_seconds = 2.0;
  std::uint64_t seed = 0;
  // Intra-op threads; 0: the cores this process may use (runtime::usable_cores), as execute runs
  // the step unless told otherwise. The trace records them.
  int threads = 0;
  // Time the machine (core/calibration.h) before each batch size and at the end.
  bool calibrate = true;
  // The step the trace is for runs torch.optim's optimizer (the Python package's), whose Adam and
  // AdamW keep each parameter's step count as a float32 tensor of its own (PyTorch 1.12 on), where
  // libtorch's keep a number: the profile holds such tensors beside its optimizer's state.
  bool torch_optim_state = false;
  // Past this a thread pool is only cost: no CPU headroom runs on has as many cores.
  static constexpr int kMaxThreads = 256;
  // Measure the Tempo variants too, where the model has any: a second pass at every batch size
  // with every Tempo variant on (Model::set_all_variants).
  bool tempo = true;
  // Where a layer's scratch memory may step between two profiled sizes by more than half a percent
  // of the step's peak (core/transient_jumps.h), a plan there is predicted up to that step over what
  // runs: sizes inside such a segment are profiled too, halving it until the step lies between
  // neighbours, at most this many (0: none).
  int locate_steps = 6;
  static constexpr int kMaxLocateSteps = 64;
  // The precision the step runs in (core/precision.h); the trace holds for it alone.
  core::Precision precision = core::Precision::Fp32;
  // On the CPU profiling stays within the host's available memory (less a reserve); a positive
  // value here lowers that bound further (tests), never raises it.
  std::int64_t host_memory_bytes = 0;
  std::function<void(const Progress&)> on_progress;
  // CUDA only: called with the last profiled step of each batch size.
  std::function<void(std::int64_t batch, const GpuStepRecord&)> on_gpu_step;
};

// What one profiled step measured of one layer: the same quantities the cost model evaluates.
using LayerMeasurement = core::LayerCost;

// One profiled training step. Byte counts are the recorder's (allocated since recording began).
struct StepMeasurement {
  std::vector<LayerMeasurement> layers;
  std::int64_t forward_ns = 0;
  std::int64_t backward_ns = 0;
  std::int64_t optimizer_ns = 0;
  std::int64_t optimizer_transient_bytes = 0;
  std::int64_t step_ns = 0;  // forward + backward + optimizer, one clock
  std::int64_t allocated_at_step_start = 0;
  // The allocator's own total as the step began (CUDA: everything on the device); -1 where nothing was reported.
  std::int64_t device_allocated_at_step_start = -1;
  std::int64_t allocated_at_forward_end = 0;
  std::int64_t peak_allocated = 0;
  // The allocator's highest reserve during each layer's forward and backward, and the step's.
  std::vector<std::int64_t> fwd_reserved_bytes, bwd_reserved_bytes;
  std::int64_t peak_reserved = 0;
  std::optional<GpuStepRecord> gpu;  // when profiled with a GPU backend
};

// One training step (forward, backward, and an optimizer step if `optimizer` is given) measured
// layer by layer. `recorder` must be installed (ScopedMemoryRecording) on this thread. With a GPU
// backend the device is synchronized at every layer boundary (so a layer's wall time includes its
// kernels, not only their launches) and CUPTI records what ran, attributed to layers. Without
// `zero_grad_first` the step's backward accumulates into gradients an earlier micro-batch left, as
// every micro-batch after a step's first does.
StepMeasurement profile_step(const models::Model& model, const models::Batch& batch, runtime::MemoryRecorder& recorder,
                             torch::optim::Optimizer* optimizer, gpu::GpuBackend* gpu = nullptr,
                             bool zero_grad_first = true);

// The optimizer's step on the host's cores per parameter element, timed on CPU copies of the first
// 16M elements of `parameters` (in their dtype, as L2L keeps them on the host) with fresh
// state, its first step left out: the rate at which L2L steps a GPU model's offloaded stages
// on the host. The parameters are untouched.
double host_optimizer_ns_per_param(const std::string& optimizer, const std::vector<torch::Tensor>& parameters);

// What each layer keeps for backward of the tensors it touches: each of its inputs, and its own
// output. Measured by running each layer on fresh copies of its inputs and seeing which copies,
// and whether its output, its autograd graph still holds once everything else has let go.
struct SavedTensors {
  std::vector<std::vector<bool>> inputs;  // per layer, per input
  std::vector<bool> output;               // per layer
};
SavedTensors detect_saved_tensors(const models::Model& model, const models::Batch& batch);

// Profiles `model` (training mode) into a trace. Throws InputError for bad options.
core::Trace profile(models::Model& model, const ProfileOptions& options);
// What profile() refuses before it measures anything (bad options, fp16-autocast off CUDA or for a
// contrastive loss), so a caller profiling several precisions can refuse the whole request at once.
void check_profile_options(const models::Model& model, const ProfileOptions& options);

}  // namespace headroom::profiler
