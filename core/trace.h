#pragma once
// The trace: what the profiler measured about one model on one device (schema headroom.trace/1).
// Plain value types; reading validates everything and names the JSON path of the first problem.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/collective.h"
#include "core/calibration.h"
#include "core/contrastive_profile.h"
#include "core/precision.h"

namespace headroom::core {

inline constexpr std::string_view kTraceSchema = "headroom.trace/1";

// Limits of what the trace reader accepts (a value past one is rejected, naming its JSON path). They
// are far beyond any real measurement and keep the planner's sums of bytes and times over all layers
// within 64 bits: 16384 layers of 16 TiB each add up to 2^58 bytes.
inline constexpr std::int64_t kMaxTraceBytes = std::int64_t{1} << 44;  // 16 TiB: any byte count (signed ones in magnitude)
inline constexpr std::int64_t kMaxTraceNs = std::int64_t{1} << 44;     // about 4.9 hours: any duration
inline constexpr std::int64_t kMaxTraceBatch = std::int64_t{1} << 20;  // a sampled batch size
inline constexpr std::int64_t kMaxTraceLayers = std::int64_t{1} << 14;  // 16384 layers

// Special values in LayerProfile::inputs (everything else is an earlier layer's id).
inline constexpr int kModelInput = -1;  // the batch's (first) input tensor
inline constexpr int kTargetInput = -2;  // the batch's target tensor (read by the loss layer)
// A model with several inputs (token ids, then an attention mask): its input k >= 1 is -2 - k.
inline constexpr int kMaxModelInputs = 16;
constexpr int model_input_id(int k) { return k == 0 ? kModelInput : -2 - k; }
// Whether an input id names one of the batch's inputs (the first or a further one), and which.
constexpr bool is_model_input(int id) { return id == kModelInput || (id <= -3 && id > -2 - kMaxModelInputs); }
constexpr int model_input_index(int id) { return id == kModelInput ? 0 : -2 - id; }
// A further input: held by the batch for the whole micro-batch, so a checkpointed block that reads
// one reads it from the batch again when it recomputes; it is not what carries the block's work in.
constexpr bool is_further_input(int id) { return id != kModelInput && is_model_input(id); }

// What a layer costs at one micro-batch size: measured (a trace's samples) or evaluated between
// samples (core::CostModel). Times are medians over the profiled repeats.
struct LayerCost {
  std::int64_t fwd_ns = 0;
  std::int64_t bwd_ns = 0;
  // Bytes the layer allocated in forward that are still allocated when the forward pass ends
  // (saved for backward, by this layer or a consumer). Each allocation counts at its producer.
  std::int64_t kept_bytes = 0;
  // Bytes of the layer's output storage.
  std::int64_t output_bytes = 0;
  // Highest allocated amount during the layer's forward (backward) above the amount at its start.
  std::int64_t fwd_transient_bytes = 0;
  std::int64_t bwd_transient_bytes = 0;
  // Net change of allocated bytes across the layer's forward (including the frees of inputs it
  // was the last reader of) and across its backward (gradients made, saved tensors released).
  // Signed; measured because aliasing (a residual add passes one gradient to both inputs) and
  // gradient accumulation are not computable from shapes.
  std::int64_t fwd_retained_bytes = 0;
  std::int64_t bwd_retained_bytes = 0;
  // How much higher the backward's peak is when the tensors earlier layers made that this layer's
  // backward frees (its saved inputs) stay allocated throughout, as L2L keeps a stage's
  // inputs in its stash. Under autocast a matrix product's saved input goes before its weight
  // cast's float32 gradient is made, so that peak is lower by the input than L2L's. Absent in
  // traces from before it was measured.
  std::optional<std::int64_t> bwd_inputs_held_extra_bytes;

  bool operator==(const LayerCost&) const = default;
};

// What the GPU did for a layer at one batch size (CUDA traces only): CUPTI's kernel records
// attributed to the layer, and the caching allocator's reserve as its reporting hook saw it.
// Medians over the profiled repeats, like the times.
struct GpuLayerCost {
  std::int64_t fwd_kernel_ns = 0;       // sum of kernel durations
  std::int64_t fwd_kernel_span_ns = 0;  // first kernel (or copy) start to last end
  std::int64_t fwd_kernels = 0;
  std::int64_t bwd_kernel_ns = 0;
  std::int64_t bwd_kernel_span_ns = 0;
  std::int64_t bwd_kernels = 0;
  std::int64_t fwd_reserved_bytes = 0;  // highest reserved by the allocator during the layer's forward
  std::int64_t bwd_reserved_bytes = 0;  // ... and during its backward
  bool operator==(const GpuLayerCost&) const = default;
};

// A layer's measured cost at one sampled micro-batch size.
struct LayerSample : LayerCost {
  std::int64_t batch = 0;
  std::optional<GpuLayerCost> gpu;  // present exactly in CUDA traces
  bool operator==(const LayerSample&) const = default;
};

// Tempo (docs/design.md, "Tempo"): the layer measured again with its memory-lean variant, in a
// profiling pass where every layer that has one runs it. Only the layer's own costs are used from
// that pass: the other layers' costs there differ only where a tensor is freed elsewhere (an input
// no longer kept is freed by its last reader's forward; an output the Tempo layer keeps is freed by
// its own backward, not by a consumer's), which the planner derives from saves_inputs and
// keeps_output.
struct TempoProfile {
  std::vector<bool> saves_inputs;    // per input, as the Tempo variant keeps them
  // The Tempo variant keeps its own output and the standard layer does not: the output then lives
  // until the Tempo layer's backward, past the consumer that would otherwise free it.
  bool keeps_output = false;
  std::vector<LayerSample> samples;  // one per Trace::batch_sizes entry, in that order
  bool operator==(const TempoProfile&) const = default;
};

// A layer whose insides the planner cannot see (a user's module: many autograd nodes, maybe
// BatchNorm recomputing on copies of its buffers) measured as a checkpointed block of its own, apart
// from the step: its recompute and backward run as the checkpoint's node runs them, with the
// block's input, the incoming gradient and the recomputed output held until the backward returns.
struct CheckpointedSample {
  std::int64_t batch = 0;
  std::int64_t recompute_transient_bytes = 0;  // highest during the recompute above its start
  std::int64_t recompute_extra_bytes = 0;      // held after the recompute beyond a standard forward (buffer copies)
  std::int64_t bwd_transient_bytes = 0;        // highest during the backward above its start
  bool operator==(const CheckpointedSample&) const = default;
};

struct LayerProfile {
  int id = 0;
  std::string name;
  std::string kind;      // linear, gelu, layernorm, attention, batchnorm, loss, ...
  int block = -1;        // the block (encoder layer, residual block) it belongs to; -1 for none
  std::vector<int> inputs;          // earlier layer ids, model inputs (model_input_id) or kTargetInput
  std::vector<bool> saves_inputs;   // per input: does the layer keep it for backward
  std::int64_t param_bytes = 0;
  // Of param_bytes, those of parameters that do not train (requires_grad false: frozen by the model
  // or by `profile --freeze`): no gradient, no optimizer state. 0 in traces from before it was recorded.
  std::int64_t frozen_param_bytes = 0;
  std::int64_t trainable_param_bytes() const { return param_bytes - frozen_param_bytes; }
  std::vector<LayerSample> samples;  // one per Trace::batch_sizes entry, in that order
  std::optional<TempoProfile> tempo;  // present exactly for layers with a memory-lean variant
  // Empty, or one per Trace::batch_sizes entry (the profiler's checkpointed pass of opaque layers).
  std::vector<CheckpointedSample> checkpointed;
  // Measured by the same pass: the layer's own output is among what its backward reads (a module
  // ending in ReLU keeps its result). Run without grad in a checkpoint it keeps nothing, so its
  // output goes when its readers let go of it.
  bool keeps_output = false;

  bool operator==(const LayerProfile&) const = default;
};

// What the GPU did in a whole step (CUDA traces only).
struct GpuStepCost {
  std::int64_t kernel_ns = 0;               // all kernels of the step, median
  std::int64_t unattributed_kernel_ns = 0;  // kernels launched outside any layer or the optimizer, median
  std::int64_t peak_reserved_bytes = 0;     // the caching allocator's highest reserve during the step
  std::int64_t device_malloc_bytes = 0;     // bytes the driver allocated during the step (CUPTI)
  bool operator==(const GpuStepCost&) const = default;
};

// A step measured as the executor runs one: gradients zeroed, micro-batches one after
// another (each one's data made when its turn comes, its loss weighted, gradients accumulating),
// then the optimizer. Medians over the sequences timed at this size: the repeats, and for short
// steps the timing rounds that follow the whole profile; traces from before it have none.
struct StepSequence {
  std::int64_t micro_batch_ns = 0;        // a micro-batch after the first: what every further one costs
  std::int64_t first_micro_batch_ns = 0;  // the step's first micro-batch (after the optimizer ran)
  std::int64_t zero_grad_ns = 0;          // zeroing the gradients, once per step
  int timed_sequences = 0;                // how many the medians are over; 0 in traces from before it was kept
  // How far micro_batch_ns may be from the machine's typical time over the profile: the relative
  // standard error of its median (1.2533 σ / √n, σ from the interquartile range of the timed
  // sequences). 0 where fewer than kLeastSequencesForError were timed, and in traces from before it
  // was recorded.
  double micro_batch_error = 0;
  bool operator==(const StepSequence&) const = default;
};
// Fewer timings than this say nothing of their spread.
inline constexpr int kLeastSequencesForError = 4;

// One whole training step at one micro-batch size.
struct StepSample {
  std::int64_t batch = 0;
  std::int64_t step_ns = 0;        // profiled step (forward, backward, optimizer), median
  std::int64_t plain_step_ns = 0;  // the same step without the profiler's hooks, median
  std::int64_t optimizer_ns = 0;   // optimizer step, median (over the plain steps, as `sequence`; older traces: the profiled ones)
  std::int64_t optimizer_transient_bytes = 0;  // highest allocated during the optimizer step above its start
  std::int64_t peak_bytes = 0;     // highest allocated amount during the step
  std::int64_t static_bytes = 0;   // parameters + gradients + optimizer state
  std::int64_t input_bytes = 0;    // the batch (its inputs and target)
  std::optional<GpuStepCost> gpu;  // present exactly in CUDA traces
  // How this batch size runs inside a step of several micro-batches; absent in traces recorded
  // before the profiler measured it (then micro-batches cost step_ns - optimizer_ns each).
  std::optional<StepSequence> sequence{};

  bool operator==(const StepSample&) const = default;
};

// A model the user brought as a file (TorchScript): where it was and what it held, so a later run
// loads the same module or says that it changed.
struct ModelFile {
  std::string path;    // absolute
  std::string sha256;  // lower-case hex of the file's bytes
  bool operator==(const ModelFile&) const = default;
};

struct ModelInfo {
  std::string name;
  std::map<std::string, std::string> config;  // every key the model was built with, as text
  std::optional<ModelFile> file;              // set for a user's model; a zoo model has none
  // `profile --freeze`'s patterns (core/freeze_patterns.h), applied again wherever the model is
  // rebuilt; a module's own requires_grad flags come back with its file.
  std::vector<std::string> freeze;
  // How a module from Python was captured: "script" (torch.jit.script) or "trace" (torch.jit.trace)
  // into the TorchScript `file`; "eager" where it ran as its own code, with no file to rebuild it
  // from, so its plans run in the user's loop (headroom.apply). Empty for the zoo's models and for
  // TorchScript files given to the command line.
  std::string capture;
  // A module of the user's (a TorchScript file or an eager capture): its layers are named after
  // its classes, not the zoo's kinds, and only headroom's own layers have Tempo variants and L2L stages.
  bool is_users_module() const { return file.has_value() || !capture.empty(); }
  bool operator==(const ModelInfo&) const = default;
};

struct DeviceInfo {
  std::string kind;  // "cpu" or "cuda"
  std::string name;
  std::int64_t total_memory_bytes = 0;
  // CUDA devices only (zero on the CPU): multiprocessors. The host<->device copy link measured
  // when the trace was recorded: pinned copies on CUDA, tensor copies on the CPU (0 in older CPU
  // traces); the latency, a copy's fixed cost, is 0 in traces from before it was measured.
  int sm_count = 0;
  double host_to_device_bytes_per_s = 0;
  double device_to_host_bytes_per_s = 0;
  std::int64_t host_to_device_latency_ns = 0;
  std::int64_t device_to_host_latency_ns = 0;
  bool is_cuda() const { return kind == "cuda"; }
  // `copies` copies moving `bytes` in all: the latency of each plus the bytes at the bandwidth.
  // 0 where the trace measured no bandwidth (the copies are then not timed) or nothing moves.
  std::int64_t host_to_device_ns(std::int64_t bytes, std::int64_t copies = 1) const;
  std::int64_t device_to_host_ns(std::int64_t bytes, std::int64_t copies = 1) const;
  bool operator==(const DeviceInfo&) const = default;
};

struct OptimizerInfo {
  std::string name;                 // "sgd" or "adam"
  std::int64_t state_bytes = 0;     // measured after the first step
  double state_bytes_per_param = 0; // state bytes per parameter element
  // A GPU trace's optimizer step on the host, per parameter element: L2L steps its offloaded
  // stages there, on the CPU's cores, not the GPU's. 0 where not measured (a CPU trace's host is
  // its device; GPU traces from before it was recorded).
  double host_ns_per_param = 0;
  // Where the step runs torch.optim's optimizer (a trace made from Python): its trainable parameter
  // tensors, each of which has a step count of 4 bytes (a float32 tensor) under Adam and AdamW,
  // counted in state_bytes; 0 for libtorch's optimizer, which keeps the count as a number.
  std::int64_t torch_optim_tensors = 0;
  // The largest trainable parameter tensor's elements: libtorch's optimizers step tensor by tensor,
  // so their temporaries are as large as it (a sharded worker steps pieces of at most
  // core::kShardedOptimizerPieceElements). 0 in traces from before it was recorded.
  std::int64_t largest_param_elements = 0;
  // How many trainable parameter tensors there are. 0 in traces from before it was recorded.
  std::int64_t param_tensors = 0;
  // The step counts' bytes an optimizer of this kind keeps (core/optimizer_spec.h's text).
  std::int64_t step_count_bytes(const std::string& optimizer) const;
  bool operator==(const OptimizerInfo&) const = default;
};

// The most seconds of timing rounds a profile may spend (an hour: more is a typo, not a wish).
inline constexpr double kMaxTimingSeconds = 3600;

struct ProfileSettings {
  int warmup_steps = 0;
  int repeats = 0;
  std::uint64_t seed = 0;
  int threads = 0;
  std::string recorded_at;  // ISO 8601 UTC
  // The seconds of timing rounds after every size was profiled (profiler::ProfileOptions); absent
  // in traces from before they were recorded (two, when there were rounds at all).
  std::optional<double> timing_seconds;
  bool operator==(const ProfileSettings&) const = default;
};

struct Trace {
  ModelInfo model;
  DeviceInfo device;
  std::map<std::string, std::string> framework;  // "torch", "headroom" versions
  // The host-memory regime the trace was measured in (core/host_memory.h); empty in traces from
  // before it was recorded, which were measured in glibc's default.
  std::string host_memory_regime;
  OptimizerInfo optimizer;
  // What the step was measured in: every figure of the trace holds for it alone. Written when not
  // fp32, the precision of traces from before it was recorded.
  Precision precision = Precision::Fp32;
  ProfileSettings profile;
  std::vector<std::int64_t> batch_sizes;  // ascending
  std::vector<LayerProfile> layers;       // in execution order, id == index
  std::vector<StepSample> steps;          // one per batch size, in that order
  // The Tempo pass's whole steps (every Tempo variant on), one per batch size; empty exactly when
  // no layer has a Tempo profile.
  std::vector<StepSample> tempo_steps;
  // What a checkpointed block holds besides its input: the RNG state saved in its forward (so
  // dropout draws the same masks when it runs again), and the same again while it is recomputed
  // (the current state, put back afterwards). Measured with the allocator hook; 0 in traces from
  // before it was recorded.
  std::int64_t checkpoint_state_bytes = 0;
  // What the model holds besides its parameters, from before the first step to the last: buffers
  // (BatchNorm's running statistics), tensors its batch generator keeps (a task's teacher), what a
  // loader keeps (a TorchScript module's debug records). Measured as the model is built; 0 in traces
  // from before it was recorded.
  std::int64_t model_extra_bytes = 0;
  // What the device's libraries keep allocated between steps besides the model's state and batch:
  // on CUDA, cuBLAS's workspace for each thread and stream that ran a matrix product (32 MiB each
  // under libtorch 2.x on a Hopper GPU; the forward's thread and autograd's make two). Measured at
  // the profiled steps' start; 0 on the CPU and in traces from before it was recorded.
  std::int64_t workspace_bytes = 0;
  // False for a trace from before those two were recorded: its plans may predict a few KiB low.
  bool extras_recorded = true;
  // The link data-parallel workers all-reduce over, measured on this host (`profile --measure-link`:
  // Gloo over loopback); what `plan --devices N` predicts the all-reduce from unless given --link.
  std::optional<CollectiveLink> link;
  // A contrastive model's loss measured alone (zoo `clip`): present exactly for such models.
  std::optional<ContrastiveProfile> contrastive_loss;
  // How fast the machine that profiled ran the calibration's kernels, at the trace's threads, timed
  // before each batch size and at the end; absent in traces from before it was recorded.
  std::optional<Calibration> calibration;
  // The same model profiled in further precisions (`profile --precision fp32,bf16-autocast`), each a
  // whole trace of its own with a distinct precision and none of its own further ones. Plans use
  // this trace's precision unless told another (`plan --precision`); which one is the user's
  // decision, since it changes the numerics.
  std::vector<Trace> other_precisions;

  bool operator==(const Trace&) const = default;

  // This trace or the one of other_precisions measured in `precision`; nullptr where none was.
  const Trace* in_precision(Precision precision) const;
  // The precisions measured: this trace's first, then other_precisions' in order.
  std::vector<Precision> precisions() const;
  // "fp32" or "fp32, bf16-autocast", for messages.
  std::string precision_list() const;

  std::int64_t param_bytes() const;
  std::int64_t frozen_param_bytes() const;
  std::int64_t trainable_param_bytes() const { return param_bytes() - frozen_param_bytes(); }
  bool has_frozen_parameters() const { return frozen_param_bytes() > 0; }
  bool has_tempo() const { return !tempo_steps.empty(); }
  // Whether the layers' samples carry bwd_inputs_held_extra_bytes (every one or none does).
  bool measures_inputs_held() const {
    return !layers.empty() && !layers.front().samples.empty() && layers.front().samples.front().bwd_inputs_held_extra_bytes;
  }
  // Index of `batch` in batch_sizes, or -1.
  int batch_index(std::int64_t batch) const;
};

nlohmann::json to_json(const Trace& trace);
// Validates the whole document, the limits above included; throws InputError "<source>: <json path>: <problem>".
Trace trace_from_json(const nlohmann::json& document, std::string_view source = "trace");

Trace read_trace_file(const std::filesystem::path& path);
void write_trace_file(const std::filesystem::path& path, const Trace& trace);

}  // namespace headroom::core
