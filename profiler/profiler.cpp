#include "profiler/profiler.h"
#include "profiler/contrastive_loss_profiler.h"

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>

#include "core/affine_fit.h"
#include "core/errors.h"
#include "core/known_names.h"
#include "core/optimizer_spec.h"
#include "core/host_memory.h"
#include "core/units.h"
#include "core/statistics.h"
#include "core/transient_jumps.h"
#include "models/model_source.h"
#include "runtime/budget_allocator.h"
#include "runtime/calibration.h"
#include "runtime/host_copy.h"
#include "runtime/host_info.h"
#include "runtime/intra_op_threads.h"
#include "runtime/optimizer.h"
#include "runtime/tensor_bytes.h"
#ifdef HEADROOM_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>

#include "profiler/cupti/cuda_backend.h"
#endif

namespace headroom::profiler {

namespace {

// The CPU's copy link, what L2L moves parameters, gradients and boundaries with between its
// host and device sides here: one memcpy each on the calling thread (runtime::host_memcpy, L2L's
// own copy) into a new tensor, from 4 KiB to 32 MiB, the median of a few at each size; a
// line through the times relative to each gives the latency (a copy's fixed cost: allocation and
// dispatch) and the bandwidth. Each copy starts with the caches holding other work, as in L2L,
// where a stage's turn of compute runs between two copies; and the source of a copy to the host is
// written just before it, as the compute has just made the gradients and boundaries it sends. A
// buffer copied over and over stays in the caches and times a link faster than L2L's copies
// run, which would predict them too short (docs/results.md, "L2L's copies on a CPU").
struct HostCopyLinks {
  core::LinkLine into_device;
  core::LinkLine out_to_host;
};

HostCopyLinks measure_host_copies() {
  constexpr std::int64_t kSizes[] = {std::int64_t{4} << 10, std::int64_t{64} << 10, std::int64_t{1} << 20,
                                     std::int64_t{8} << 20, std::int64_t{32} << 20};
  constexpr int kRepeats = 7;
  const torch::Tensor source = torch::ones({kSizes[std::size(kSizes) - 1]}, torch::kUInt8);
  // Written before each copy, it takes the source (and the memory the copy's new tensor reuses)
  // out of these machines' last-level caches, as a stage's turn of compute does.
  const torch::Tensor flush = torch::empty({std::int64_t{96} << 20}, torch::kUInt8);
  const auto line = [&](bool source_just_written) {
    std::vector<double> bytes, seconds;
    for (const std::int64_t size : kSizes) {
      const torch::Tensor from = source.narrow(0, 0, size);
      std::vector<double> times;
      for (int r = 0; r <= kRepeats; ++r) {
        flush.fill_(r);
        if (source_just_written) from.fill_(1);
        const auto start = std::chrono::steady_clock::now();
        const torch::Tensor copy = runtime::host_memcpy(from);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (copy.data_ptr<std::uint8_t>()[size / 2] != 1) throw std::runtime_error("host copy probe: the copy differs");
        if (r > 0) times.push_back(std::max(s, 1e-9));  // the first warms the allocator
      }
      bytes.push_back(static_cast<double>(size));
      seconds.push_back(core::median(times));
    }
    return core::fit_link_line(bytes, seconds, "host copy probe");
  };
  HostCopyLinks links;
  links.into_device = line(false);
  links.out_to_host = line(true);
  return links;
}

}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

// The GPU side of a profiled step; does nothing without a backend. Synchronizing at layer
// boundaries makes wall-clock intervals cover the GPU's work; one range per layer phase lets CUPTI
// attribute kernels. Forward pushes on the caller's thread, backward on autograd's device thread;
// the two never run at once, so the range table needs no lock.
class GpuTracking {
 public:
  explicit GpuTracking(gpu::GpuBackend* backend) : backend_(backend) {}
  void synchronize() {
    if (backend_ != nullptr) backend_->synchronize();
  }
  void push(int layer, gpu::Phase phase) {
    if (backend_ != nullptr) backend_->activities().push_range(ranges_.open(layer, phase));
  }
  void pop() {
    if (backend_ != nullptr) backend_->activities().pop_range();
  }
  gpu::GpuBackend* backend() const { return backend_; }
  gpu::RangeTable& ranges() { return ranges_; }

 private:
  gpu::GpuBackend* backend_;
  gpu::RangeTable ranges_;
};

// Forward: each layer's call is bracketed, so its allocations, time and the autograd sequence
// numbers of the nodes it creates are its own.
class ForwardAttribution : public models::LayerObserver {
 public:
  ForwardAttribution(runtime::MemoryRecorder& recorder, std::vector<LayerMeasurement>& layers,
                     std::vector<std::int64_t>& reserved, GpuTracking& gpu)
      : recorder_(recorder), layers_(layers), reserved_(reserved), gpu_(gpu), seq_begin_(layers.size()),
        seq_end_(layers.size()), start_level_(layers.size()) {}

  void before_layer(int layer) override {
    const auto i = static_cast<std::size_t>(layer);
    gpu_.synchronize();
    seq_begin_[i] = at::sequence_number::peek();
    recorder_.set_owner(layer);
    recorder_.mark();
    start_level_[i] = recorder_.allocated();
    gpu_.push(layer, gpu::Phase::Forward);
    start_ = Clock::now();
  }

  void after_layer(int layer, const torch::Tensor& output) override {
    gpu_.synchronize();
    const auto end = Clock::now();
    gpu_.pop();
    const auto i = static_cast<std::size_t>(layer);
    layers_[i].fwd_ns = ns_between(start_, end);
    reserved_[i] = recorder_.reserved_peak_since_mark();
    layers_[i].fwd_transient_bytes = recorder_.peak_since_mark() - start_level_[i];
    layers_[i].output_bytes = output.defined() ? static_cast<std::int64_t>(output.storage().nbytes()) : 0;
    seq_end_[i] = at::sequence_number::peek();
    recorder_.set_owner(runtime::MemoryRecorder::kNoOwner);
  }

  // Called when forward has ended: a layer leaves behind what was allocated from its start to the
  // next layer's start (its last-read inputs are freed in between).
  void finish(std::int64_t level_at_end) {
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const std::int64_t next = i + 1 < layers_.size() ? start_level_[i + 1] : level_at_end;
      layers_[i].fwd_retained_bytes = next - start_level_[i];
    }
  }

  // The layer whose forward created the autograd node with this sequence number, or -1.
  int layer_of(std::int64_t seq) const {
    if (seq < 0) return -1;  // AccumulateGrad and other nodes without a forward op
    const auto s = static_cast<std::uint64_t>(seq);
    const auto it = std::upper_bound(seq_begin_.begin(), seq_begin_.end(), s);
    if (it == seq_begin_.begin()) return -1;
    const auto i = static_cast<std::size_t>(it - seq_begin_.begin() - 1);
    return s < seq_end_[i] ? static_cast<int>(i) : -1;
  }

 private:
  runtime::MemoryRecorder& recorder_;
  std::vector<LayerMeasurement>& layers_;
  std::vector<std::int64_t>& reserved_;
  GpuTracking& gpu_;
  std::vector<std::uint64_t> seq_begin_, seq_end_;
  std::vector<std::int64_t> start_level_;
  Clock::time_point start_;
};

// Backward: the engine runs nodes one at a time (on this thread for the CPU, on its device thread
// for CUDA), highest sequence number first, so a layer's nodes run together. Every node start that
// belongs to another layer closes the current layer's interval; time and memory in between are
// that layer's. Each node's GPU work is a range of the layer current when it starts.
class BackwardAttribution {
 public:
  BackwardAttribution(const ForwardAttribution& forward, runtime::MemoryRecorder& recorder,
                      std::vector<LayerMeasurement>& layers, std::vector<std::int64_t>& reserved, GpuTracking& gpu)
      : forward_(forward), recorder_(recorder), layers_(layers), reserved_(reserved), gpu_(gpu) {}

  void begin(int layer) {
    current_ = layer;
    // What this layer's backward frees of earlier layers' allocations: its saved inputs (and views
    // of them), which L2L's stash holds where they are a stage's inputs.
    recorder_.hold_frees_of_owners_below(layer);
    recorder_.mark();
    level_ = recorder_.allocated();
    since_ = Clock::now();
  }

  void on_node_start(std::int64_t seq) {
    const int layer = forward_.layer_of(seq);
    if (layer >= 0 && layer != current_) {
      close();
      begin(layer);
    }
    gpu_.push(current_, gpu::Phase::Backward);
  }
  void on_node_end() { gpu_.pop(); }

  void end() {
    close();
    recorder_.hold_frees_of_owners_below(0);
  }

 private:
  void close() {
    gpu_.synchronize();
    const auto i = static_cast<std::size_t>(current_);
    reserved_[i] = std::max(reserved_[i], recorder_.reserved_peak_since_mark());
    auto& m = layers_[i];
    m.bwd_ns += ns_between(since_, Clock::now());
    // A layer's backward may come in several intervals: the held transient is the highest over them too.
    const std::int64_t held = std::max(m.bwd_transient_bytes + m.bwd_inputs_held_extra_bytes.value_or(0),
                                       recorder_.peak_holding_since_mark() - level_);
    m.bwd_transient_bytes = std::max(m.bwd_transient_bytes, recorder_.peak_since_mark() - level_);
    m.bwd_inputs_held_extra_bytes = held - m.bwd_transient_bytes;
    m.bwd_retained_bytes += recorder_.allocated() - level_;
  }

  const ForwardAttribution& forward_;
  runtime::MemoryRecorder& recorder_;
  std::vector<LayerMeasurement>& layers_;
  std::vector<std::int64_t>& reserved_;
  GpuTracking& gpu_;
  int current_ = 0;
  std::int64_t level_ = 0;
  Clock::time_point since_;
};

// RecordFunction callbacks are plain function pointers; they reach the active attribution here.
// Only one profiled backward runs at a time (profile_step is not re-entrant).
BackwardAttribution* g_backward = nullptr;

std::unique_ptr<at::ObserverContext> on_backward_node_start(const at::RecordFunction& fn) {
  if (g_backward != nullptr) g_backward->on_node_start(fn.seqNr());
  return nullptr;
}

void on_backward_node_end(const at::RecordFunction& /*fn*/, at::ObserverContext* /*context*/) {
  if (g_backward != nullptr) g_backward->on_node_end();
}

class BackwardCallbackScope {
 public:
  explicit BackwardCallbackScope(BackwardAttribution& attribution) {
    g_backward = &attribution;
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&on_backward_node_start, &on_backward_node_end)
            .scopes({at::RecordScope::BACKWARD_FUNCTION}));
  }
  ~BackwardCallbackScope() {
    at::removeCallback(handle_);
    g_backward = nullptr;
  }
  BackwardCallbackScope(const BackwardCallbackScope&) = delete;
  BackwardCallbackScope& operator=(const BackwardCallbackScope&) = delete;

 private:
  at::CallbackHandle handle_;
};

// The loss weight of a micro-batch in a step of two equal ones (the executor weights by b_i / B).
constexpr double kSequenceWeight = 0.5;
// fp16-autocast: steps skipped for overflow before profiling gives up (the loss scale halves with
// each, from 2^16: 40 reach 2^-24).
constexpr int kMaxOverflowingSteps = 40;
// After every size is profiled, rounds of one plain sequence at each size and variant (see
// ProfileRun::run_timing_rounds): as many as ProfileOptions::timing_seconds hold, at most this many a second (each
// size's median then over up to `repeats` + 20 sequences in the default two seconds). A profile
// whose round takes longer gets none: its repeats at one size already span that long.
constexpr double kMaxTimingRoundsPerSecond = 10;
// A step in a layer's scratch memory between two profiled sizes is located where it may be more
// than this share of the step's peak (a plan there is predicted up to that much over).
constexpr double kLocateShare = 0.005;

// The caching allocator's unused blocks handed back to the device, so that a size measured after
// larger ones does not read their reserve (CUDA; the CPU keeps no cache).
void release_cached_blocks(const torch::Device& device) {
#ifdef HEADROOM_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)device;
#endif
}

// The trace's samples in ascending batch order (sizes that locate a step are measured after the others).
void in_batch_order(core::Trace& trace) {
  const auto by_batch = [](const auto& a, const auto& b) { return a.batch < b.batch; };
  std::sort(trace.batch_sizes.begin(), trace.batch_sizes.end());
  for (auto& layer : trace.layers) {
    std::sort(layer.samples.begin(), layer.samples.end(), by_batch);
    std::sort(layer.checkpointed.begin(), layer.checkpointed.end(), by_batch);
    if (layer.tempo) std::sort(layer.tempo->samples.begin(), layer.tempo->samples.end(), by_batch);
  }
  std::sort(trace.steps.begin(), trace.steps.end(), by_batch);
  std::sort(trace.tempo_steps.begin(), trace.tempo_steps.end(), by_batch);
}

void synchronize(gpu::GpuBackend* gpu) {
  if (gpu != nullptr) gpu->synchronize();
}

struct MicroBatchTimes {
  std::int64_t data_ns = 0;     // making the micro-batch's data
  std::int64_t compute_ns = 0;  // its forward and backward
};

// One micro-batch as the executor runs one: its data made when its turn comes, its loss weighted,
// gradients accumulating, the loss read back.
// `scaler`: fp16-autocast's loss scaling (the optimizer's), or nullptr.
MicroBatchTimes plain_micro_batch(const models::Model& model, std::int64_t b, std::uint64_t seed,
                                  const std::function<models::Batch(models::Batch)>& on_device, gpu::GpuBackend* gpu,
                                  const runtime::LossScaler* scaler) {
  synchronize(gpu);
  const auto start = Clock::now();
  const models::Batch batch = on_device(model.make_batch(b, seed));
  synchronize(gpu);
  const auto made = Clock::now();
  {
    torch::Tensor loss = model.forward(batch) * kSequenceWeight;
    (scaler != nullptr ? scaler->scale(loss) : loss).backward();
    (void)loss.item<double>();
  }
  synchronize(gpu);
  return {ns_between(start, made), ns_between(made, Clock::now())};
}

std::int64_t zero_gradients(torch::optim::Optimizer& optimizer, gpu::GpuBackend* gpu) {
  synchronize(gpu);
  const auto start = Clock::now();
  runtime::zero_gradients_kept(optimizer);
  synchronize(gpu);
  return ns_between(start, Clock::now());
}

// A step of two micro-batches without the profiler's hooks, each part timed: what the executor's
// steps are made of (zeroing, a first micro-batch, further ones, the optimizer).
struct PlainSequence {
  std::int64_t zero_grad_ns = 0;
  MicroBatchTimes first, later;
  std::int64_t optimizer_ns = 0;
};

PlainSequence plain_sequence(const models::Model& model, std::int64_t b, std::uint64_t seed,
                             const std::function<models::Batch(models::Batch)>& on_device, torch::optim::Optimizer& optimizer,
                             gpu::GpuBackend* gpu) {
  PlainSequence out;
  out.zero_grad_ns = zero_gradients(optimizer, gpu);
  out.first = plain_micro_batch(model, b, seed, on_device, gpu, runtime::loss_scaler_of(optimizer));
  out.later = plain_micro_batch(model, b, seed + 1, on_device, gpu, runtime::loss_scaler_of(optimizer));
  const auto start = Clock::now();
  optimizer.step();
  synchronize(gpu);
  out.optimizer_ns = ns_between(start, Clock::now());
  return out;
}

// A size's plain sequences, part by part. What the cost model reads (a further micro-batch, the
// first, zeroing, the optimizer) is the median over all of them, the repeats' and the timing
// rounds'; plain_step_ns the median over the repeats alone, the window the profiled steps were
// timed in, so that their ratio is the profiler's overhead.
class SequenceTimes {
 public:
  void add(const PlainSequence& plain) {
    plain_.push_back(plain.later.compute_ns + plain.optimizer_ns);
    zero_grad_.push_back(plain.zero_grad_ns);
    first_.push_back(plain.first.data_ns + plain.first.compute_ns);
    later_.push_back(plain.later.data_ns + plain.later.compute_ns);
    optimizer_.push_back(plain.optimizer_ns);
  }
  void drop_last() {
    for (auto* times : {&plain_, &zero_grad_, &first_, &later_, &optimizer_}) times->pop_back();
  }
  // What one more sequence takes, about.
  std::int64_t sequence_ns() const {
    if (later_.empty()) return 0;
    return core::median(zero_grad_) + core::median(first_) + core::median(later_) + core::median(optimizer_);
  }
  std::int64_t plain_step_ns() const { return core::median(plain_); }
  void set_medians(core::StepSample& step) const {
    step.optimizer_ns = core::median(optimizer_);
    const std::vector<double> later(later_.begin(), later_.end());
    // Past 1 a median resolves nothing more (and the trace format stops there).
    const double error = std::min(1.0, core::relative_median_error(later, core::kLeastSequencesForError));
    step.sequence = core::StepSequence{.micro_batch_ns = core::median(later_),
                                       .first_micro_batch_ns = core::median(first_),
                                       .zero_grad_ns = core::median(zero_grad_),
                                       .timed_sequences = static_cast<int>(later_.size()),
                                       .micro_batch_error = error};
  }

 private:
  std::vector<std::int64_t> plain_, zero_grad_, first_, later_, optimizer_;
};

// What profiling may allocate on the host, and what a batch needs of it. On the CPU the host's
// memory is the device's: a batch it cannot hold is refused before it runs (exit 3, naming the
// largest that fits), and an allocation past it anywhere fails with its batch and phase, from the
// counting allocator, instead of the system's out-of-memory killer ending the process.
class HostBound {
 public:
  // Leaves some of what is available for what libtorch does not allocate (threads, malloc's free
  // heap, the trace being built).
  static std::int64_t usable(std::int64_t available) {
    return available - std::max<std::int64_t>(std::int64_t{512} << 20, available / 20);
  }

  explicit HostBound(std::int64_t bytes) : bytes_(bytes), budget_(bytes) {}
  std::int64_t bytes() const { return bytes_; }
  // Work that is not profiling the model (timing the machine) runs outside the bound.
  void suspend() { budget_.suspend(); }
  void resume() { budget_.resume(); }
  std::int64_t allocated_since_start() const { return runtime::BudgetAllocator::instance().in_use() - budget_.baseline(); }

  // A micro-batch's need above the model's state, affine in the batch (docs/design.md, "Fits"), from
  // two measured ones; `state_bytes` is the state allocated since the bound began (gradients) and
  // still to come (the optimizer's).
  void learn(std::int64_t b1, std::int64_t need1, std::int64_t b2, std::int64_t need2, std::int64_t state_bytes) {
    per_sample_ = static_cast<double>(need2 - need1) / static_cast<double>(b2 - b1);
    fixed_ = static_cast<double>(need1) - per_sample_ * static_cast<double>(b1) + static_cast<double>(state_bytes);
    known_ = per_sample_ > 0;
  }
  bool known() const { return known_; }
  // What profiling batch `b` holds at its highest, of the bound.
  double need(std::int64_t b) const { return fixed_ + per_sample_ * static_cast<double>(b); }
  std::int64_t largest_batch() const {
    return known_ ? static_cast<std::int64_t>(std::max(0.0, (static_cast<double>(bytes_) - fixed_) / per_sample_)) : 0;
  }
  std::string largest_text() const {
    const std::int64_t b = largest_batch();
    return b > 0 ? "the largest batch that fits is about " + std::to_string(b)
                 : "not even a batch of 1 fits";
  }

 private:
  std::int64_t bytes_;
  runtime::ScopedBudget budget_;
  double fixed_ = 0, per_sample_ = 0;
  bool known_ = false;
};

// A profiled step's backward, each autograd node's time and memory attributed to the layer whose
// forward made it.
void attributed_backward(const torch::Tensor& loss, const ForwardAttribution& forward, runtime::MemoryRecorder& recorder,
                         torch::optim::Optimizer* optimizer, GpuTracking& gpu, StepMeasurement& step) {
  // Every layer has the held figure, 0 where its backward runs no node (a layer on the batch alone):
  // a trace has it for every sample or for none.
  for (auto& layer : step.layers) layer.bwd_inputs_held_extra_bytes = 0;
  BackwardAttribution backward(forward, recorder, step.layers, step.bwd_reserved_bytes, gpu);
  BackwardCallbackScope callbacks(backward);
  backward.begin(static_cast<int>(step.layers.size()) - 1);
  if (optimizer != nullptr) {
    runtime::backward_of(loss, *optimizer);
  } else {
    loss.backward();
  }
  backward.end();
}

// The optimizer's step within a profiled one; returns the memory it needs beyond what it keeps.
std::int64_t profiled_optimizer_step(torch::optim::Optimizer& optimizer, runtime::MemoryRecorder& recorder, GpuTracking& gpu) {
  recorder.mark();
  const std::int64_t level = recorder.allocated();
  gpu.push(-1, gpu::Phase::Optimizer);
  optimizer.step();
  gpu.synchronize();
  gpu.pop();
  return recorder.peak_since_mark() - level;
}

// What CUPTI recorded since `origin_ns`, attributed to the layers' ranges.
GpuStepRecord gpu_step_record(gpu::GpuBackend& backend, GpuTracking& gpu, std::uint64_t origin_ns, std::size_t layer_count) {
  GpuStepRecord record;
  record.log = backend.activities().flush();
  if (record.log.dropped_records > 0) {
    // Lost records would make some layers' GPU time silently too small.
    throw std::runtime_error("CUPTI dropped " + std::to_string(record.log.dropped_records) +
                             " activity records in a profiled step; per-layer GPU times would be incomplete");
  }
  record.ranges = std::move(gpu.ranges());
  record.origin_ns = origin_ns;
  record.attribution = gpu::attribute(record.log, record.ranges, layer_count);
  return record;
}

}  // namespace

StepMeasurement profile_step(const models::Model& model, const models::Batch& batch, runtime::MemoryRecorder& recorder,
                             torch::optim::Optimizer* optimizer, gpu::GpuBackend* gpu_backend, bool zero_grad_first) {
  StepMeasurement step;
  const std::size_t layer_count = model.layers().size();
  step.layers.resize(layer_count);
  step.fwd_reserved_bytes.assign(layer_count, 0);
  step.bwd_reserved_bytes.assign(layer_count, 0);
  if (optimizer != nullptr && zero_grad_first) runtime::zero_gradients_kept(*optimizer);

  GpuTracking gpu(gpu_backend);
  gpu.synchronize();
  std::uint64_t origin_ns = 0;
  if (gpu_backend != nullptr) {
    gpu_backend->activities().flush();  // nothing from before this step
    origin_ns = gpu_backend->activities().now_ns();
  }
  recorder.set_owner(runtime::MemoryRecorder::kNoOwner);
  recorder.reset_peak();
  step.allocated_at_step_start = recorder.allocated();
  // The device's own level now, where the recorder has seen it; else the first report in the step
  // tells it (a recorder made for this step has seen nothing yet).
  const std::int64_t device_level = recorder.device_allocated();
  ForwardAttribution forward(recorder, step.layers, step.fwd_reserved_bytes, gpu);

  const auto start = Clock::now();
  torch::Tensor loss = model.forward(batch, &forward);
  const auto forward_end = Clock::now();
  step.allocated_at_forward_end = recorder.allocated();
  forward.finish(step.allocated_at_forward_end);
  for (std::size_t i = 0; i < step.layers.size(); ++i) {
    step.layers[i].kept_bytes = recorder.live_bytes_of(static_cast<int>(i));
  }

  attributed_backward(loss, forward, recorder, optimizer, gpu, step);
  loss = torch::Tensor();
  const auto backward_end = Clock::now();

  if (optimizer != nullptr) step.optimizer_transient_bytes = profiled_optimizer_step(*optimizer, recorder, gpu);
  const auto end = Clock::now();
  step.peak_reserved = recorder.reserved_peak();
  if (gpu_backend != nullptr) step.gpu = gpu_step_record(*gpu_backend, gpu, origin_ns, layer_count);

  step.forward_ns = ns_between(start, forward_end);
  step.backward_ns = ns_between(forward_end, backward_end);
  step.optimizer_ns = ns_between(backward_end, end);
  step.step_ns = ns_between(start, end);
  step.peak_allocated = recorder.peak();
  step.device_allocated_at_step_start = device_level >= 0 ? device_level : recorder.device_allocated_at_start();
  return step;
}

SavedTensors detect_saved_tensors(const models::Model& model, const models::Batch& batch) {
  if (const models::KnownSaves* known = model.known_saves()) return {known->inputs, known->output};
  const auto& layers = model.layers();
  const models::RunContext context = model.context();
  SavedTensors saves{std::vector<std::vector<bool>>(layers.size()), std::vector<bool>(layers.size(), false)};
  std::vector<torch::Tensor> outputs(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto inputs = models::gather_inputs(layers[i], batch, outputs);
    {
      // Fresh copies with their own storage, so "still referenced after the layer ran" can only
      // mean the layer's autograd graph saved them.
      std::vector<torch::Tensor> copies;
      std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> watched;
      for (const auto& input : inputs) {
        torch::Tensor copy = input.detach().clone();
        if (input.requires_grad()) copy = copy.requires_grad_(true).clone();  // a non-leaf, as in the model
        watched.push_back(copy.storage().getWeakStorageImpl());
        copies.push_back(std::move(copy));
      }
      torch::Tensor out = layers[i].run(copies, context);
      const auto graph = out.grad_fn();  // keeps the saved tensors alive while the others go
      const auto output_storage = out.storage().getWeakStorageImpl();
      out = torch::Tensor();
      copies.clear();
      for (const auto& w : watched) saves.inputs[i].push_back(!w.expired());
      // An output that is a view of an input shares that input's storage: only a storage of its
      // own says something about the output.
      bool own_storage = true;
      for (const auto& w : watched) own_storage &= !(w == output_storage);
      saves.output[i] = own_storage && !output_storage.expired();
    }
    outputs[i] = layers[i].run(inputs, context);
  }
  return saves;
}

namespace {

// Which of a layer's inputs carries the work in, the others being the batch's further inputs (read
// from the batch again by a checkpoint's recompute); -1 where there is not exactly one such.
int carried_input(const models::Layer& layer) {
  int carried = -1;
  for (std::size_t k = 0; k < layer.inputs.size(); ++k) {
    if (core::is_further_input(layer.inputs[k])) continue;
    if (carried >= 0 || layer.inputs[k] == models::kTargetInput) return -1;
    carried = static_cast<int>(k);
  }
  return carried;
}

// Layers the planner cannot see into (not a zoo kind: a user's module, many autograd nodes) that
// are a checkpointable block of their own: the checkpointed pass measures them.
std::vector<std::size_t> opaque_blocks(const models::Model& model) {
  // A model run whole has no layer that runs alone: its checkpointed blocks are estimated from the
  // standard pass, as in traces from before the checkpointed pass was measured.
  if (model.runs_whole()) return {};
  const auto& layers = model.layers();
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& layer = layers[i];
    if (core::is_known(core::kZooLayerKinds, layer.kind) || layer.block < 0) continue;
    if (carried_input(layer) < 0) continue;
    bool alone = true;
    for (std::size_t j = 0; j < layers.size(); ++j) alone &= j == i || layers[j].block != layer.block;
    if (alone) out.push_back(i);
  }
  return out;
}

// One layer as a checkpointed block of its own, run as the executor's checkpoint node runs one
// (executor/plan_runner.cpp): from a leaf copy of its input, the recompute with grad (BatchNorm on
// copies of its buffers), then the backward with the incoming gradient and the recomputed output
// held until it returns. A standard forward from the same input first gives what the recompute
// holds beyond it. Gradients accumulate into the parameters' as in a step's later micro-batch.
core::CheckpointedSample checkpointed_alone(const models::Layer& layer, std::vector<torch::Tensor> inputs, int carried,
                                            bool input_grad, models::RunContext context, std::int64_t b,
                                            torch::Device device, bool& keeps_output) {
  auto recorder = std::make_shared<runtime::MemoryRecorder>(device.type());
  runtime::ScopedMemoryRecording recording(recorder);
  auto& x = inputs[static_cast<std::size_t>(carried)];
  x = x.detach().requires_grad_(input_grad);
  std::int64_t standard_retained = 0;
  torch::Tensor grad;
  {
    context.recomputing = false;
    const std::int64_t start = recorder->allocated();
    torch::Tensor y = layer.run(inputs, context);
    standard_retained = recorder->allocated() - start;
    grad = torch::ones_like(y);  // allocated after the measurement; the graph goes with y
    // Whether the layer's graph keeps its output: with only the graph left, is the storage alive?
    const auto graph = y.grad_fn();
    const auto storage = y.storage().getWeakStorageImpl();
    y = torch::Tensor();
    keeps_output = graph != nullptr && !storage.expired();
  }
  context.recomputing = true;
  recorder->mark();
  const std::int64_t start = recorder->allocated();
  const torch::Tensor y = layer.run(inputs, context);
  core::CheckpointedSample out;
  out.batch = b;
  out.recompute_transient_bytes = recorder->peak_since_mark() - start;
  out.recompute_extra_bytes = std::max<std::int64_t>(recorder->allocated() - start - standard_retained, 0);
  recorder->mark();
  const std::int64_t level = recorder->allocated();
  if (y.requires_grad()) torch::autograd::backward({y}, {grad});
  out.bwd_transient_bytes = recorder->peak_since_mark() - level;
  return out;
}

// The checkpointed pass at one batch: the model's forward without grad, and each of `measured`
// (ascending) run alone from its input as it comes; `keeps_output` per measured layer.
std::vector<core::CheckpointedSample> checkpointed_pass(const models::Model& model, const models::Batch& batch,
                                                        const std::vector<std::size_t>& measured, torch::Device device,
                                                        std::vector<bool>& keeps_output) {
  const auto& layers = model.layers();
  const auto& last_readers = model.last_readers();
  const models::RunContext context = model.context();
  std::vector<torch::Tensor> outputs(layers.size());
  std::vector<bool> carries_gradient(layers.size(), false);  // in a step, as the executor runs one
  std::vector<core::CheckpointedSample> out;
  keeps_output.assign(measured.size(), false);
  for (std::size_t i = 0, next = 0; i < layers.size() && next < measured.size(); ++i) {
    const auto& layer = layers[i];
    const auto inputs = models::gather_inputs(layer, batch, outputs);
    bool gradient = !layer.parameters.empty();
    for (const int j : layer.inputs) gradient = gradient || (j >= 0 && carries_gradient[static_cast<std::size_t>(j)]);
    carries_gradient[i] = gradient;
    if (measured[next] == i) {
      const int carried = carried_input(layer);
      const int from = layer.inputs[static_cast<std::size_t>(carried)];
      const bool input_grad = from >= 0 && carries_gradient[static_cast<std::size_t>(from)];
      bool keeps = false;
      out.push_back(checkpointed_alone(layer, inputs, carried, input_grad, context, batch.size(), device, keeps));
      keeps_output[next] = keeps;
      ++next;
    }
    {
      torch::NoGradGuard no_grad;
      outputs[i] = layer.run(inputs, context);
    }
    for (const int j : layer.inputs) {
      if (j >= 0 && last_readers[static_cast<std::size_t>(j)] <= static_cast<int>(i)) outputs[static_cast<std::size_t>(j)] = torch::Tensor();
    }
  }
  return out;
}

// What profiling a batch of `b` allocates above what is allocated before it (the gradients already
// exist): its phases as profile() runs them, each with the batch it holds alive meanwhile.
std::int64_t profiling_need(const models::Model& model, std::int64_t b, std::uint64_t seed,
                            const std::function<models::Batch(models::Batch)>& on_device) {
  auto recorder = std::make_shared<runtime::MemoryRecorder>();
  runtime::ScopedMemoryRecording recording(recorder);
  recorder->reset_peak();
  const std::int64_t start = recorder->allocated();
  {
    const models::Batch batch = on_device(model.make_batch(b, seed));
    detect_saved_tensors(model, batch);
  }
  {
    const models::Batch held = on_device(model.make_batch(b, seed));
    plain_micro_batch(model, b, seed + 1, on_device, nullptr, nullptr);
  }
  return recorder->peak() - start;
}

}  // namespace

void check_profile_options(const models::Model& model, const ProfileOptions& options) {
  if (options.batch_sizes.empty()) throw core::InputError("batch_sizes: give at least one batch size");
  for (std::size_t i = 0; i < options.batch_sizes.size(); ++i) {
    if (options.batch_sizes[i] <= 0) throw core::InputError("batch_sizes: batch sizes must be positive");
    if (options.batch_sizes[i] > core::kMaxTraceBatch) {
      throw core::InputError("batch_sizes: at most " + std::to_string(core::kMaxTraceBatch) + " samples, got " +
                             std::to_string(options.batch_sizes[i]));
    }
    if (i > 0 && options.batch_sizes[i] <= options.batch_sizes[i - 1]) {
      throw core::InputError("batch_sizes: batch sizes must be strictly ascending");
    }
  }
  if (options.warmup_steps < 1) {
    throw core::InputError("warmup_steps: at least one warm-up step is needed (it allocates the optimizer state)");
  }
  if (options.repeats < 1) throw core::InputError("repeats: at least one repeat is needed");
  if (!(options.timing_seconds >= 0 && options.timing_seconds <= core::kMaxTimingSeconds)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", options.timing_seconds);
    throw core::InputError("timing_seconds: expected 0 (no timing rounds) to " +
                           std::to_string(static_cast<int>(core::kMaxTimingSeconds)) + " seconds, got " + got);
  }
  if (options.locate_steps < 0 || options.locate_steps > ProfileOptions::kMaxLocateSteps) {
    throw core::InputError("locate_steps: expected 0 (none) to " + std::to_string(ProfileOptions::kMaxLocateSteps) +
                           " sizes more, got " + std::to_string(options.locate_steps));
  }
  if (options.host_memory_bytes < 0) throw core::InputError("host_memory_bytes: expected 0 (what the host has) or more");
  if (options.threads < 0 || options.threads > ProfileOptions::kMaxThreads) {
    throw core::InputError("threads: expected 0 (libtorch's default) to " + std::to_string(ProfileOptions::kMaxThreads) + ", got " +
                           std::to_string(options.threads));
  }
  if (options.device != "cpu" && options.device != "cuda") {
    throw core::InputError("device: expected cpu or cuda, got '" + options.device + "'");
  }
  if (options.precision == core::Precision::Fp16Autocast && options.device != "cuda") {
    throw core::InputError("precision: fp16-autocast runs on CUDA (with loss scaling); on the CPU autocast's lower "
                           "precision is bf16-autocast");
  }
  if (model.runs_whole() && options.precision != core::Precision::Fp32) {
    // Each layer's autocast region is headroom's to open where it runs the layers; a module run
    // whole opens its own.
    throw core::InputError("precision: a module captured in eager PyTorch (" + model.name() + ") is profiled in fp32; "
                           "capture=\"script\" profiles it in " + std::string(core::precision_name(options.precision)));
  }
  if (options.precision == core::Precision::Fp16Autocast && contrastive_loss_layer(model) >= 0) {
    // Its micro-batched step is the gradient cache, whose backward passes run no loss scaling.
    throw core::InputError("precision: fp16-autocast is not run for a contrastive loss (the gradient cache's backward "
                           "passes scale no loss); profile " + model.name() + " in fp32, bf16-autocast or bf16");
  }
}

namespace {

// The CUDA backend, or a clear reason why there is none.
std::unique_ptr<gpu::GpuBackend> make_gpu_backend() {
#ifdef HEADROOM_WITH_CUDA
  if (!torch::cuda::is_available()) {
    throw core::InputError("device cuda: this libtorch sees no CUDA device (a CPU-only libtorch, or no GPU)");
  }
  return cupti::make_cuda_backend(0);
#else
  throw core::InputError("device cuda: this build profiles on the CPU only (configure with -DHEADROOM_WITH_CUDA=ON "
                         "against a CUDA libtorch; see scripts/gpu-build.sh)");
#endif
}

std::int64_t median_of(const std::vector<StepMeasurement>& runs,
                       const std::function<std::int64_t(const StepMeasurement&)>& field) {
  std::vector<std::int64_t> values;
  values.reserve(runs.size());
  for (const auto& run : runs) values.push_back(field(run));
  return core::median(std::move(values));
}

// Per layer GPU numbers for one batch size: times and counts are medians over the repeats, like
// the wall times; the reserve is the last repeat's (it does not depend on the values).
core::GpuLayerCost gpu_layer_cost(const std::vector<StepMeasurement>& runs, std::size_t i) {
  const auto fwd = [i](const StepMeasurement& r) -> const gpu::GpuWork& { return r.gpu->attribution.forward[i]; };
  const auto bwd = [i](const StepMeasurement& r) -> const gpu::GpuWork& { return r.gpu->attribution.backward[i]; };
  core::GpuLayerCost g;
  g.fwd_kernel_ns = median_of(runs, [&](const StepMeasurement& r) { return fwd(r).kernel_ns; });
  g.fwd_kernel_span_ns = median_of(runs, [&](const StepMeasurement& r) { return fwd(r).span_ns; });
  g.fwd_kernels = median_of(runs, [&](const StepMeasurement& r) { return fwd(r).kernels; });
  g.bwd_kernel_ns = median_of(runs, [&](const StepMeasurement& r) { return bwd(r).kernel_ns; });
  g.bwd_kernel_span_ns = median_of(runs, [&](const StepMeasurement& r) { return bwd(r).span_ns; });
  g.bwd_kernels = median_of(runs, [&](const StepMeasurement& r) { return bwd(r).kernels; });
  g.fwd_reserved_bytes = runs.back().fwd_reserved_bytes[i];
  g.bwd_reserved_bytes = runs.back().bwd_reserved_bytes[i];
  return g;
}

}  // namespace

double host_optimizer_ns_per_param(const std::string& optimizer_name, const std::vector<torch::Tensor>& parameters) {
  // Enough elements that a 16-core host's step takes milliseconds, not microseconds of overhead.
  constexpr std::int64_t kSampleElements = std::int64_t{16} << 20;
  constexpr int kTimedSteps = 3;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> copies;
  std::int64_t elements = 0;
  for (const auto& p : parameters) {
    if (elements >= kSampleElements) break;
    // In the parameter's own dtype, as L2L keeps it on the host: a bfloat16 one makes the
    // optimizer keep float32 master weights there too. A piece of a tensor larger than what is
    // left, so that a billion-element embedding costs no more than the sample.
    const std::int64_t take = std::min<std::int64_t>(p.numel(), kSampleElements - elements);
    torch::Tensor copy = p.detach().flatten().narrow(0, 0, take).to(torch::kCPU, p.scalar_type(), false, /*copy=*/true);
    copy.set_requires_grad(true);
    copy.mutable_grad() = torch::full_like(copy, 1e-3);
    elements += take;
    copies.push_back(std::move(copy));
  }
  if (elements == 0) return 0;
  auto optimizer = runtime::make_optimizer(optimizer_name, copies);
  optimizer->step();  // allocates the state, as L2L's first step does: not timed
  std::vector<std::int64_t> times;
  for (int i = 0; i < kTimedSteps; ++i) {
    const auto start = Clock::now();
    optimizer->step();
    times.push_back(ns_between(start, Clock::now()));
  }
  return static_cast<double>(core::median(std::move(times))) / static_cast<double>(elements);
}

namespace {

core::GpuStepCost gpu_step_cost(const std::vector<StepMeasurement>& runs) {
  core::GpuStepCost g;
  g.kernel_ns = median_of(runs, [](const StepMeasurement& r) { return r.gpu->attribution.kernel_ns; });
  g.unattributed_kernel_ns =
      median_of(runs, [](const StepMeasurement& r) { return r.gpu->attribution.unattributed.kernel_ns; });
  g.peak_reserved_bytes = runs.back().peak_reserved;
  g.device_malloc_bytes = runs.back().gpu->attribution.malloc_bytes;
  return g;
}

}  // namespace

namespace {

// What one pass (standard or Tempo) at one size measured: its samples, its step, and its plain
// sequences' parts, for the timing rounds to add to.
struct PassMeasurement {
  std::vector<core::LayerSample> layers;
  core::StepSample step;
  SequenceTimes sequences;
};

// One pass's plain sequences at one size, kept for the timing rounds.
struct TimedPass {
  std::int64_t batch;
  bool tempo;  // of trace.tempo_steps, else of trace.steps
  SequenceTimes sequences;
};

// The profiled steps of one pass at one size, and the plain sequences alternated with them.
struct RepeatedSteps {
  std::vector<StepMeasurement> runs;
  SequenceTimes sequences;
};

// The progress phases of a pass: the standard one's, or the Tempo one's.
struct PassPhases {
  const char* warmup;
  const char* plain;
  const char* profile;
};

PassPhases phases_of(bool tempo) {
  return tempo ? PassPhases{"tempo warmup", "tempo plain", "tempo profile"} : PassPhases{"warmup", "plain", "profile"};
}

// One profile() call, one method per phase, in the order run() calls them: the device, model and
// optimizer set up; the model described in the trace; the passes and their progress counted; on
// the CPU the host memory bounded; the saved inputs detected; every size measured (the standard
// pass, the checkpointed one, the Tempo one), the machine timed before each; sizes added where
// scratch memory steps; the timing rounds; and what is measured once at the end.
class ProfileRun {
 public:
  ProfileRun(models::Model& model, const ProfileOptions& options) : model_(model), options_(options) {}

  core::Trace run() {
    set_up();
    describe_model();
    count_passes();
    if (backend_ == nullptr) bound_host_memory();
    within_host_memory([this] { detect_saves(); });
    for (const std::int64_t b : options_.batch_sizes) {
      calibrate(b);
      measure_size(b);
    }
    locate_transient_steps();
    run_timing_rounds();
    finish();
    return std::move(trace_);
  }

 private:
  void set_up();
  void describe_model();
  void count_passes();
  void bound_host_memory();
  std::int64_t probe_need(std::int64_t b, std::uint64_t seed);
  std::int64_t estimated_optimizer_state_bytes() const;
  void refuse_sizes_past_the_bound(std::int64_t b1, std::int64_t b2) const;
  void within_host_memory(const std::function<void()>& work);
  void detect_saves();
  void calibrate(std::int64_t b);
  void measure_size(std::int64_t b);
  void measure_checkpointed(const models::Batch& batch, std::int64_t b);
  PassMeasurement measure(const models::Batch& batch, std::int64_t b, bool tempo);
  void warm_up(std::int64_t b, bool tempo);
  RepeatedSteps repeat_steps(const models::Batch& batch, std::int64_t b, bool tempo);
  std::vector<core::LayerSample> layer_samples(const std::vector<StepMeasurement>& runs, std::int64_t b) const;
  core::StepSample step_sample(const models::Batch& batch, std::int64_t b, bool tempo, const RepeatedSteps& repeated);
  void locate_transient_steps();
  int timing_round_count() const;
  void run_timing_rounds();
  void finish();

  void report(const char* phase, std::int64_t batch) {
    progress_.phase = phase;
    progress_.batch = batch;
    ++progress_.step;
    if (options_.on_progress) options_.on_progress(progress_);
    progress_.note.clear();
  }
  // The plain steps' data at each size, the same in the timing rounds as in the repeats.
  std::uint64_t data_seed_of(std::int64_t b) const { return options_.seed + 7919 * static_cast<std::uint64_t>(b); }

  models::Model& model_;
  const ProfileOptions& options_;
  std::string regime_;
  std::unique_ptr<gpu::GpuBackend> backend_;
  torch::Device device_{torch::kCPU};
  std::function<models::Batch(models::Batch)> on_device_;
  std::vector<torch::Tensor> parameters_;  // the trainable ones
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  // ProfileOptions::torch_optim_state's step counts, one per trainable parameter tensor.
  std::vector<torch::Tensor> step_counts_;
  // The optimizer's state as the trained step holds it: its own and any step counts.
  std::int64_t optimizer_state_bytes() const;
  std::size_t layer_count_ = 0;
  core::Trace trace_;
  std::vector<std::size_t> tempo_layers_;  // Tempo layers, measured in a second pass
  std::vector<std::size_t> opaque_;       // measured in the checkpointed pass (opaque_blocks)
  Progress progress_;
  int per_size_steps_ = 0;  // progress steps a size takes
  ContrastiveProfileOptions contrastive_;
  int contrastive_samples_ = 0;
  std::optional<HostBound> host_bound_;  // on the CPU
  // Where the work is, so running out of host memory can say where it happened and what fits.
  std::string where_ = "inputs";
  std::int64_t where_batch_ = 0;
  std::int64_t workspace_bytes_ = -1;  // not yet seen
  std::vector<TimedPass> timed_;       // every size's plain sequences, standard and Tempo
};

void ProfileRun::set_up() {
  check_profile_options(model_, options_);
  // Measured in the regime the executor runs in (core/host_memory.h); the trace says which.
  regime_ = core::enter_host_memory_regime();
  backend_ = options_.device == "cuda" ? make_gpu_backend() : nullptr;
  device_ = backend_ != nullptr ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  on_device_ = [this](models::Batch batch) { return backend_ != nullptr ? batch.to(device_) : batch; };
  runtime::use_threads(options_.threads > 0 ? options_.threads : runtime::usable_cores());
  model_.to(device_);
  model_.set_training(true);
  model_.set_precision(options_.precision);
  parameters_ = model_.trainable_parameters();  // a frozen parameter gets no optimizer state
  // fp16-autocast's step scales its loss and unscales its gradients, as the executor's does.
  optimizer_ = runtime::make_optimizer(options_.optimizer, parameters_,
                                       options_.precision == core::Precision::Fp16Autocast
                                           ? std::optional<runtime::LossScaleOptions>(runtime::LossScaleOptions{})
                                           : std::nullopt);
  // A module run whole is the user's own code, whose path may depend on its weights (a loop until a
  // step changes little): its profiled steps do all their work but move no weight (learning rate
  // 0), so that each runs the module as the user's weights run it.
  if (model_.runs_whole()) {
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(0.0);
  }
  const core::OptimizerSpec spec = core::parse_optimizer_spec(options_.optimizer);
  if (options_.torch_optim_state && spec.kind != core::OptimizerSpec::Kind::Sgd) {
    for (std::size_t k = 0; k < parameters_.size(); ++k) {
      step_counts_.push_back(torch::zeros({}, torch::dtype(torch::kFloat32).device(device_)));
    }
  }
  layer_count_ = model_.layers().size();
  where_batch_ = options_.batch_sizes.front();
}

// The trace's header (model, device, framework, options) and its layers, before anything is profiled.
void ProfileRun::describe_model() {
  trace_.model = models::model_source(model_);
  if (backend_ != nullptr) {
    trace_.device = backend_->properties();
  } else {
    trace_.device = runtime::cpu_device_info();
    const HostCopyLinks links = measure_host_copies();
    trace_.device.host_to_device_bytes_per_s = links.into_device.bytes_per_second;
    trace_.device.host_to_device_latency_ns = links.into_device.latency_ns;
    trace_.device.device_to_host_bytes_per_s = links.out_to_host.bytes_per_second;
    trace_.device.device_to_host_latency_ns = links.out_to_host.latency_ns;
  }
  trace_.framework = {{"torch", TORCH_VERSION}, {"headroom", HEADROOM_VERSION}};
  trace_.host_memory_regime = regime_;
  trace_.optimizer.name = options_.optimizer;
  trace_.precision = options_.precision;
  trace_.profile = {options_.warmup_steps, options_.repeats, options_.seed, at::get_num_threads(), runtime::utc_timestamp_now(),
                    options_.timing_seconds};
  trace_.batch_sizes = options_.batch_sizes;
  {
    // What the executor's checkpointed blocks save: the generator's state, as get_state copies it.
    auto recorder = std::make_shared<runtime::MemoryRecorder>(device_.type());
    runtime::ScopedMemoryRecording recording(recorder);
    const torch::Tensor state = at::globalContext().defaultGenerator(device_).get_state();
    trace_.checkpoint_state_bytes = recorder->allocated();
  }
  trace_.model_extra_bytes = model_.extra_resident_bytes();
  trace_.layers.resize(layer_count_);
  for (std::size_t i = 0; i < layer_count_; ++i) {
    const auto& layer = model_.layers()[i];
    auto& out = trace_.layers[i];
    out.id = static_cast<int>(i);
    out.name = layer.name;
    out.kind = layer.kind;
    out.block = layer.block;
    out.inputs = layer.inputs;
    for (const auto& p : layer.parameters) {
      out.param_bytes += runtime::tensor_bytes(p);
      if (!p.requires_grad()) out.frozen_param_bytes += runtime::tensor_bytes(p);
    }
  }
}

// Which passes each size gets (Tempo's where the model has Tempo layers, the checkpointed one where
// it has opaque blocks), and so how many progress steps the whole profile takes.
void ProfileRun::count_passes() {
  for (std::size_t i = 0; i < layer_count_; ++i) {
    // Tempo layers are headroom's own autograd functions, measured where they run (core/precision.h).
    if (options_.tempo && core::tempo_layers_run_in(options_.precision, options_.device == "cuda") &&
        model_.layers()[i].has_tempo_variant()) {
      tempo_layers_.push_back(i);
    }
  }
  const int passes = tempo_layers_.empty() ? 1 : 2;
  opaque_ = opaque_blocks(model_);
  const int calibrations = options_.calibrate ? static_cast<int>(options_.batch_sizes.size()) + 1 : 0;
  contrastive_samples_ = contrastive_loss_layer(model_) >= 0 ? contrastive_.sample_count() : 0;
  // On CUDA the host's optimizer step is timed last (L2L runs it there).
  per_size_steps_ = passes * (options_.warmup_steps + 2 * options_.repeats) + (opaque_.empty() ? 0 : 1);
  progress_.total = passes + calibrations + contrastive_samples_ + (backend_ != nullptr ? 1 : 0) +
                    static_cast<int>(options_.batch_sizes.size()) * per_size_steps_;
}

// On the CPU: the bound profiling stays within, and a refusal of every size asked for that would
// pass it, from what probed sizes needed.
void ProfileRun::bound_host_memory() {
  const std::int64_t available = core::available_host_memory_bytes();
  if (available <= 0) throw std::runtime_error("profiling: cannot read the host's available memory (/proc/meminfo)");
  std::int64_t bound = HostBound::usable(available);
  if (options_.host_memory_bytes > 0) bound = std::min(bound, options_.host_memory_bytes);
  host_bound_.emplace(bound);
  const std::uint64_t probe_seed = options_.seed + 104729;
  // Doubling batches from the smallest requested or 2 (BatchNorm cannot train on one sample, so a
  // user who asks for 1 has a model that can), after one that makes the gradients, up to the
  // largest requested or a small share of the bound: memory is affine in the batch only roughly
  // at the smallest sizes (docs/design.md, "Fits"), so the slope is taken from the two largest
  // probed.
  const std::int64_t probe_cap = std::min<std::int64_t>(host_bound_->bytes() / 16, std::int64_t{64} << 20);
  std::int64_t b1 = std::min<std::int64_t>(options_.batch_sizes.front(), 2);
  probe_need(b1, probe_seed);
  std::int64_t need1 = probe_need(b1, probe_seed), b2 = 2 * b1, need2 = probe_need(b2, probe_seed);
  while (need2 < probe_cap && 2 * b2 <= options_.batch_sizes.back()) {
    b1 = b2;
    need1 = need2;
    b2 *= 2;
    need2 = probe_need(b2, probe_seed);
  }
  zero_gradients(*optimizer_, nullptr);
  const std::int64_t optimizer_state = estimated_optimizer_state_bytes();
  const std::int64_t gradients = host_bound_->allocated_since_start();
  host_bound_->learn(b1, need1, b2, need2, gradients + optimizer_state);
  refuse_sizes_past_the_bound(b1, b2);
}

// What profiling a batch of `b` needs; a refusal by the bound is that batch not fitting.
std::int64_t ProfileRun::probe_need(std::int64_t b, std::uint64_t seed) {
  runtime::BudgetAllocator::clear_last_refusal();
  try {
    return profiling_need(model_, b, seed, on_device_);
  } catch (const std::exception&) {
    if (runtime::BudgetAllocator::last_refusal().requested_bytes == 0) throw;
    throw core::DoesNotFitError("profiling: a batch of " + std::to_string(b) + " does not fit in the " +
                                core::format_bytes(host_bound_->bytes()) + " of host memory available to profiling");
  }
}

// Adam keeps two moments per trainable parameter (three with amsgrad), SGD with momentum one; the
// step's temporaries are a few of the largest parameter's size.
std::int64_t ProfileRun::estimated_optimizer_state_bytes() const {
  std::int64_t parameter_bytes = 0, largest_parameter = 0;
  for (const auto& p : parameters_) {
    parameter_bytes += runtime::tensor_bytes(p);
    largest_parameter = std::max(largest_parameter, runtime::tensor_bytes(p));
  }
  return core::parse_optimizer_spec(options_.optimizer).state_buffers() * parameter_bytes + 2 * largest_parameter;
}

std::int64_t ProfileRun::optimizer_state_bytes() const {
  std::int64_t bytes = runtime::optimizer_state_bytes(*optimizer_);
  for (const auto& t : step_counts_) bytes += runtime::tensor_bytes(t);
  return bytes;
}

// `b1`, `b2`: the probed sizes the bound's slope came from.
void ProfileRun::refuse_sizes_past_the_bound(std::int64_t b1, std::int64_t b2) const {
  for (const std::int64_t b : options_.batch_sizes) {
    if (host_bound_->known() && host_bound_->need(b) > static_cast<double>(host_bound_->bytes())) {
      throw core::DoesNotFitError("profiling batch " + std::to_string(b) + " needs about " +
                                  core::format_bytes(static_cast<std::int64_t>(std::min(host_bound_->need(b), 9e18))) +
                                  " of host memory (from profiling batches of " + std::to_string(b1) + " and " + std::to_string(b2) + "), more than the " +
                                  core::format_bytes(host_bound_->bytes()) + " available to profiling; " +
                                  host_bound_->largest_text());
    }
  }
}

// Runs `work`; an allocation that fails in it becomes an error naming the batch and phase (where_,
// where_batch_), and past the bound, what fits.
void ProfileRun::within_host_memory(const std::function<void()>& work) {
  runtime::BudgetAllocator::clear_last_refusal();
  try {
    work();
  } catch (const std::exception& e) {
    // TorchScript's interpreter rethrows an op's error as a plain one: the bound's refusal on
    // this thread tells them apart.
    const runtime::Refusal refusal = runtime::BudgetAllocator::last_refusal();
    if (!host_bound_ || refusal.requested_bytes == 0) {
      // The system refused an allocation below the bound (memory taken by another process
      // meanwhile): still a runtime failure, but one that says where.
      const std::string message = e.what();
      if (message.find("can't allocate memory") == std::string::npos) throw;
      throw std::runtime_error("profiling batch " + std::to_string(where_batch_) + " (" + where_ +
                               "): " + message.substr(0, message.find('\n')));
    }
    throw core::DoesNotFitError("profiling batch " + std::to_string(where_batch_) + " (" + where_ + "): allocating " +
                                core::format_bytes(refusal.requested_bytes) + " would pass the " +
                                core::format_bytes(host_bound_->bytes()) + " of host memory available to profiling; " +
                                host_bound_->largest_text());
  }
}

// Which inputs (and outputs) each layer's autograd graph saves, and its Tempo variant's.
void ProfileRun::detect_saves() {
  const models::Batch first_batch = on_device_(model_.make_batch(options_.batch_sizes.front(), options_.seed));
  const auto saves = detect_saved_tensors(model_, first_batch);
  for (std::size_t i = 0; i < layer_count_; ++i) trace_.layers[i].saves_inputs = saves.inputs[i];
  // A model run whole has no checkpointed pass to find it: its own run said which outputs it keeps.
  if (model_.runs_whole()) {
    for (std::size_t i = 0; i < layer_count_; ++i) trace_.layers[i].keeps_output = saves.output[i];
  }
  report("inputs", options_.batch_sizes.front());
  if (tempo_layers_.empty()) return;
  where_ = "tempo inputs";
  model_.set_all_variants(core::LayerVariant::Tempo);
  const auto tempo_saves = detect_saved_tensors(model_, first_batch);
  model_.set_all_variants(core::LayerVariant::Standard);
  for (const std::size_t i : tempo_layers_) {
    trace_.layers[i].tempo = core::TempoProfile{tempo_saves.inputs[i], tempo_saves.output[i] && !saves.output[i], {}};
  }
  report("tempo inputs", options_.batch_sizes.front());
}

// The machine's speed before each batch size and at the end: a change while profiling is seen.
// Its ~100 MiB of arrays are not the model's: outside the host bound, freed before the model runs.
void ProfileRun::calibrate(std::int64_t b) {
  if (!options_.calibrate) return;
  if (!trace_.calibration) {
    trace_.calibration = core::Calibration{};
    trace_.calibration->device = trace_.device.name;
    trace_.calibration->threads = at::get_num_threads();
    trace_.calibration->measured_at = trace_.profile.recorded_at;
  }
  if (host_bound_) host_bound_->suspend();
  trace_.calibration->runs.push_back(runtime::time_calibration_kernels(device_));
  if (host_bound_) host_bound_->resume();
  report("calibration", b);
}

// Every pass at one size into the trace: the standard one, the checkpointed one, the Tempo one.
void ProfileRun::measure_size(std::int64_t b) {
  within_host_memory([this, b] {
    where_batch_ = b;
    where_ = "data";
    const models::Batch batch = on_device_(model_.make_batch(b, options_.seed + static_cast<std::uint64_t>(b)));
    PassMeasurement standard = measure(batch, b, false);
    for (std::size_t i = 0; i < layer_count_; ++i) trace_.layers[i].samples.push_back(standard.layers[i]);
    trace_.steps.push_back(standard.step);
    timed_.push_back({b, false, std::move(standard.sequences)});
    if (!opaque_.empty()) measure_checkpointed(batch, b);
    if (tempo_layers_.empty()) return;
    // The Tempo pass right after the standard one at the same batch, so their times compare.
    model_.set_all_variants(core::LayerVariant::Tempo);
    PassMeasurement tempo_pass = measure(batch, b, true);
    model_.set_all_variants(core::LayerVariant::Standard);
    for (const std::size_t i : tempo_layers_) trace_.layers[i].tempo->samples.push_back(tempo_pass.layers[i]);
    trace_.tempo_steps.push_back(tempo_pass.step);
    timed_.push_back({b, true, std::move(tempo_pass.sequences)});
  });
}

void ProfileRun::measure_checkpointed(const models::Batch& batch, std::int64_t b) {
  where_ = "checkpointed";
  std::vector<bool> keeps;
  const auto alone = checkpointed_pass(model_, batch, opaque_, device_, keeps);
  for (std::size_t k = 0; k < opaque_.size(); ++k) {
    trace_.layers[opaque_[k]].checkpointed.push_back(alone[k]);
    trace_.layers[opaque_[k]].keeps_output = trace_.layers[opaque_[k]].keeps_output || keeps[k];
  }
  report("checkpointed", b);
}

// Every step, plain or profiled, runs the way the executor runs one: gradients zeroed, then two
// micro-batches, the second accumulating into the first's gradients, then the optimizer. The
// profiled micro-batch is the second, so layers are timed warm, as every micro-batch after a
// step's first runs; what a step pays once (zeroing, the first micro-batch's extra, the
// optimizer) is timed apart in the plain steps. Warm-up steps first, then plain and profiled
// steps alternating, so drift over the run (caches, allocator pools, other load) affects both
// alike and their ratio is the profiler's overhead.
PassMeasurement ProfileRun::measure(const models::Batch& batch, std::int64_t b, bool tempo) {
  warm_up(b, tempo);
  RepeatedSteps repeated = repeat_steps(batch, b, tempo);
  PassMeasurement out;
  out.layers = layer_samples(repeated.runs, b);
  out.step = step_sample(batch, b, tempo, repeated);
  out.sequences = std::move(repeated.sequences);
  return out;
}

void ProfileRun::warm_up(std::int64_t b, bool tempo) {
  const char* warmup_phase = phases_of(tempo).warmup;
  const std::uint64_t data_seed = data_seed_of(b);
  where_batch_ = b;
  where_ = warmup_phase;
  for (int i = 0; i < options_.warmup_steps; ++i) {
    plain_sequence(model_, b, data_seed, on_device_, *optimizer_, backend_.get());
    report(warmup_phase, b);
  }
  // fp16-autocast: a step whose gradients overflowed at the loss scale is skipped and makes no
  // optimizer state; warm up until one has stepped (the scale halves with each skip).
  const runtime::LossScaler* scaler = runtime::loss_scaler_of(*optimizer_);
  for (int extra = 0; scaler != nullptr && runtime::optimizer_state_bytes(*optimizer_) <= scaler->buffer_bytes(); ++extra) {
    if (extra == kMaxOverflowingSteps) {
      char scale[32];
      std::snprintf(scale, sizeof scale, "%g", scaler->current_scale());
      throw core::InputError("precision: fp16-autocast: every step's gradients overflowed, at loss scales down to " +
                             std::string(scale));
    }
    plain_sequence(model_, b, data_seed, on_device_, *optimizer_, backend_.get());
  }
}

// `repeats` plain sequences, each followed by a profiled step.
RepeatedSteps ProfileRun::repeat_steps(const models::Batch& batch, std::int64_t b, bool tempo) {
  const PassPhases phases = phases_of(tempo);
  const std::uint64_t data_seed = data_seed_of(b);
  const runtime::LossScaler* scaler = runtime::loss_scaler_of(*optimizer_);
  RepeatedSteps out;
  int overflowed_repeats = 0;
  for (int i = 0; i < options_.repeats; ++i) {
    where_ = phases.plain;
    const std::int64_t skipped = scaler != nullptr ? scaler->skipped_steps() : 0;
    out.sequences.add(plain_sequence(model_, b, data_seed, on_device_, *optimizer_, backend_.get()));
    zero_gradients(*optimizer_, backend_.get());
    plain_micro_batch(model_, b, data_seed, on_device_, backend_.get(), runtime::loss_scaler_of(*optimizer_));
    where_ = phases.profile;
    auto recorder = std::make_shared<runtime::MemoryRecorder>(device_.type());
    runtime::ScopedMemoryRecording recording(recorder);
    // CUPTI records only the profiled steps, so the plain steps stay the overhead's reference.
    if (backend_ != nullptr) backend_->activities().set_enabled(true);
    out.runs.push_back(profile_step(model_, batch, *recorder, optimizer_.get(), backend_.get(), /*zero_grad_first=*/false));
    if (backend_ != nullptr) backend_->activities().set_enabled(false);
    // A skipped step's optimizer figures are the unscaling alone: the plain and the profiled step
    // are measured again (fp16-autocast).
    if (scaler != nullptr && scaler->skipped_steps() != skipped) {
      if (++overflowed_repeats == kMaxOverflowingSteps) {
        throw core::InputError("precision: fp16-autocast: the profiled steps' gradients overflowed " +
                               std::to_string(kMaxOverflowingSteps) + " times");
      }
      out.runs.pop_back();
      out.sequences.drop_last();
      --i;
      continue;
    }
    report(phases.plain, b);
    if (recorder->untracked_frees() != 0) {
      throw std::logic_error("profiled step freed memory allocated before it began; its bytes would be wrong");
    }
    report(phases.profile, b);
  }
  return out;
}

// Bytes do not depend on the values, so every repeat measures the same; times take the median.
std::vector<core::LayerSample> ProfileRun::layer_samples(const std::vector<StepMeasurement>& runs, std::int64_t b) const {
  const StepMeasurement& last = runs.back();
  std::vector<core::LayerSample> out;
  for (std::size_t i = 0; i < layer_count_; ++i) {
    std::vector<std::int64_t> fwd, bwd;
    for (const auto& run : runs) {
      fwd.push_back(run.layers[i].fwd_ns);
      bwd.push_back(run.layers[i].bwd_ns);
    }
    core::LayerSample sample{last.layers[i], b, std::nullopt};
    sample.fwd_ns = core::median(fwd);
    sample.bwd_ns = core::median(bwd);
    if (backend_ != nullptr) sample.gpu = gpu_layer_cost(runs, i);
    out.push_back(sample);
  }
  return out;
}

core::StepSample ProfileRun::step_sample(const models::Batch& batch, std::int64_t b, bool tempo, const RepeatedSteps& repeated) {
  const std::vector<StepMeasurement>& runs = repeated.runs;
  const StepMeasurement& last = runs.back();
  std::int64_t static_bytes = optimizer_state_bytes() + trace_.model_extra_bytes;
  for (const auto& p : model_.parameters()) static_bytes += runtime::tensor_bytes(p) + runtime::tensor_bytes(p.grad());
  std::vector<std::int64_t> step_ns;
  for (const auto& run : runs) step_ns.push_back(run.step_ns);
  core::StepSample step;
  step.batch = b;
  step.step_ns = core::median(step_ns);
  step.plain_step_ns = repeated.sequences.plain_step_ns();
  repeated.sequences.set_medians(step);
  step.optimizer_transient_bytes = last.optimizer_transient_bytes;
  step.static_bytes = static_bytes;
  step.input_bytes = batch.bytes();
  // Between steps only the static state and the batch are allocated, so the step's peak is them
  // plus the most the recorder saw above its level at the step's start.
  step.peak_bytes = static_bytes + step.input_bytes + (last.peak_allocated - last.allocated_at_step_start);
  if (device_.is_cuda() && last.device_allocated_at_step_start >= 0) {
    // What else the device held as the step began: the libraries' workspaces (the smallest seen
    // at any size, so nothing a size left behind is taken for one).
    const std::int64_t held = std::max<std::int64_t>(last.device_allocated_at_step_start - static_bytes - step.input_bytes, 0);
    workspace_bytes_ = workspace_bytes_ < 0 ? held : std::min(workspace_bytes_, held);
  }
  if (backend_ != nullptr) {
    step.gpu = gpu_step_cost(runs);
    if (options_.on_gpu_step && !tempo) options_.on_gpu_step(b, *last.gpu);
  }
  return step;
}

// Scratch memory that steps between two profiled sizes is bounded there by the whole step
// (core/transient_jumps.h): the segments where that is more than kLocateShare of the step are
// halved, round by round, until the step lies between neighbours. Each such size is measured as
// the others were: the machine timed before it, and on CUDA not behind the larger sizes' cached
// blocks (the others' reserve holds the calibration's and the smaller sizes' cached blocks).
void ProfileRun::locate_transient_steps() {
  std::vector<std::int64_t> located;
  while (located.size() < static_cast<std::size_t>(options_.locate_steps)) {
    const std::vector<core::TransientJump> jumps =
        core::jumps_worth_locating(trace_, kLocateShare, static_cast<std::size_t>(options_.locate_steps) - located.size());
    if (jumps.empty()) break;
    for (const auto& jump : jumps) {
      const std::int64_t b = jump.middle();
      progress_.total += per_size_steps_ + (options_.calibrate ? 1 : 0);
      progress_.note = jump.layer + "'s " + jump.what + " may step by up to " + core::format_bytes(jump.bytes) +
                       " between batches " + std::to_string(jump.from_batch) + " and " + std::to_string(jump.to_batch) +
                       ": profiling " + std::to_string(b) + " as well, to find where";
      trace_.batch_sizes.push_back(b);
      // As a size in order would be: after smaller sizes' blocks (here the caching allocator's,
      // handed back), behind the machine's timing.
      release_cached_blocks(device_);
      calibrate(b);
      measure_size(b);
      located.push_back(b);
    }
    in_batch_order(trace_);
  }
}

// A shared machine's speed wanders over tenths of a second and over seconds (docs/design.md,
// "Time on the machine at hand"), so a size's repeats, a few tens of milliseconds one after
// another, see one speed. Rounds of one plain sequence at every size, as many as fit in
// options.timing_seconds (at most kMaxTimingRoundsPerSecond a second), spread each size's samples
// over all of them: its median is the machine's over the whole profile, as the other sizes' are,
// and the sizes compare with each other.
int ProfileRun::timing_round_count() const {
  std::int64_t round_ns = 0;
  for (const TimedPass& t : timed_) round_ns += t.sequences.sequence_ns();
  const double max_rounds = std::floor(kMaxTimingRoundsPerSecond * options_.timing_seconds);
  return round_ns > 0
             ? static_cast<int>(std::min(max_rounds, std::floor(options_.timing_seconds * 1e9 / static_cast<double>(round_ns))))
             : 0;
}

void ProfileRun::run_timing_rounds() {
  const int rounds = timing_round_count();
  progress_.total += rounds;
  const runtime::LossScaler* scaler = runtime::loss_scaler_of(*optimizer_);
  for (int r = 0; r < rounds; ++r) {
    for (TimedPass& t : timed_) {
      within_host_memory([&] {
        where_ = "timing rounds";
        where_batch_ = t.batch;
        model_.set_all_variants(t.tempo ? core::LayerVariant::Tempo : core::LayerVariant::Standard);
        const std::int64_t skipped = scaler != nullptr ? scaler->skipped_steps() : 0;
        const PlainSequence plain = plain_sequence(model_, t.batch, data_seed_of(t.batch), on_device_, *optimizer_, backend_.get());
        // A skipped step's optimizer is the unscaling alone (fp16-autocast): not a sample.
        if (scaler == nullptr || scaler->skipped_steps() == skipped) t.sequences.add(plain);
      });
    }
    // Once a round, which runs every size: the batch shown is the largest.
    report("timing rounds", options_.batch_sizes.back());
  }
  model_.set_all_variants(core::LayerVariant::Standard);
  for (const TimedPass& t : timed_) {
    t.sequences.set_medians((t.tempo ? trace_.tempo_steps : trace_.steps)[static_cast<std::size_t>(trace_.batch_index(t.batch))]);
  }
}

// What is measured once, after every size: the workspaces, the machine's last timing, the
// contrastive loss alone, the optimizer's state and (CUDA) its step on the host.
void ProfileRun::finish() {
  // The workspaces are held through every step: in each one's peak, and planned as static state.
  trace_.workspace_bytes = std::max<std::int64_t>(workspace_bytes_, 0);
  for (auto* steps : {&trace_.steps, &trace_.tempo_steps}) {
    for (auto& step : *steps) step.peak_bytes += trace_.workspace_bytes;
  }

  calibrate(options_.batch_sizes.back());

  if (contrastive_samples_ > 0) {
    contrastive_.on_sample = [this](std::int64_t b) { report("contrastive loss", b); };
    trace_.contrastive_loss = profile_contrastive_loss(model_, device_, contrastive_);
  }
  std::int64_t param_elements = 0;
  for (const auto& p : parameters_) {
    param_elements += p.numel();
    trace_.optimizer.largest_param_elements = std::max<std::int64_t>(trace_.optimizer.largest_param_elements, p.numel());
  }
  trace_.optimizer.param_tensors = static_cast<std::int64_t>(parameters_.size());
  trace_.optimizer.state_bytes = optimizer_state_bytes();
  if (options_.torch_optim_state) trace_.optimizer.torch_optim_tensors = static_cast<std::int64_t>(parameters_.size());
  trace_.optimizer.state_bytes_per_param =
      param_elements > 0 ? static_cast<double>(trace_.optimizer.state_bytes) / static_cast<double>(param_elements) : 0.0;
  if (device_.is_cuda()) {
    trace_.optimizer.host_ns_per_param = host_optimizer_ns_per_param(options_.optimizer, parameters_);
    report("host optimizer", options_.batch_sizes.back());
  }
}

}  // namespace

core::Trace profile(models::Model& model, const ProfileOptions& options) { return ProfileRun(model, options).run(); }

}  // namespace headroom::profiler
