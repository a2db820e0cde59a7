#include "profiler/profiler.h"

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>

#include "core/errors.h"
#include "profiler/host_info.h"

namespace headroom::profiler {

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

std::int64_t median(std::vector<std::int64_t> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::int64_t tensor_bytes(const torch::Tensor& t) {
  return t.defined() ? static_cast<std::int64_t>(t.numel() * t.element_size()) : 0;
}

// Forward: each layer's call is bracketed, so its allocations, time and the autograd sequence
// numbers of the nodes it creates are its own.
class ForwardAttribution : public models::LayerObserver {
 public:
  ForwardAttribution(MemoryRecorder& recorder, std::vector<LayerMeasurement>& layers)
      : recorder_(recorder), layers_(layers), seq_begin_(layers.size()), seq_end_(layers.size()),
        start_level_(layers.size()) {}

  void before_layer(int layer) override {
    const auto i = static_cast<std::size_t>(layer);
    seq_begin_[i] = at::sequence_number::peek();
    recorder_.set_owner(layer);
    recorder_.mark();
    start_level_[i] = recorder_.allocated();
    start_ = Clock::now();
  }

  void after_layer(int layer, const torch::Tensor& output) override {
    const auto end = Clock::now();
    const auto i = static_cast<std::size_t>(layer);
    layers_[i].fwd_ns = ns_between(start_, end);
    layers_[i].fwd_transient_bytes = recorder_.peak_since_mark() - start_level_[i];
    layers_[i].output_bytes = output.defined() ? static_cast<std::int64_t>(output.storage().nbytes()) : 0;
    seq_end_[i] = at::sequence_number::peek();
    recorder_.set_owner(MemoryRecorder::kNoOwner);
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
  MemoryRecorder& recorder_;
  std::vector<LayerMeasurement>& layers_;
  std::vector<std::uint64_t> seq_begin_, seq_end_;
  std::vector<std::int64_t> start_level_;
  Clock::time_point start_;
};

// Backward: the engine runs nodes one at a time on this thread (CPU), highest sequence number
// first, so a layer's nodes run together. Every node start that belongs to another layer closes
// the current layer's interval; time and memory in between are that layer's.
class BackwardAttribution {
 public:
  BackwardAttribution(const ForwardAttribution& forward, MemoryRecorder& recorder,
                      std::vector<LayerMeasurement>& layers)
      : forward_(forward), recorder_(recorder), layers_(layers) {}

  void begin(int layer) {
    current_ = layer;
    recorder_.mark();
    level_ = recorder_.allocated();
    since_ = Clock::now();
  }

  void on_node(std::int64_t seq) {
    const int layer = forward_.layer_of(seq);
    if (layer < 0 || layer == current_) return;
    close();
    begin(layer);
  }

  void end() { close(); }

 private:
  void close() {
    auto& m = layers_[static_cast<std::size_t>(current_)];
    m.bwd_ns += ns_between(since_, Clock::now());
    m.bwd_transient_bytes = std::max(m.bwd_transient_bytes, recorder_.peak_since_mark() - level_);
    m.bwd_retained_bytes += recorder_.allocated() - level_;
  }

  const ForwardAttribution& forward_;
  MemoryRecorder& recorder_;
  std::vector<LayerMeasurement>& layers_;
  int current_ = 0;
  std::int64_t level_ = 0;
  Clock::time_point since_;
};

// RecordFunction callbacks are plain function pointers; they reach the active attribution here.
// Only one profiled backward runs at a time (profile_step is not re-entrant).
BackwardAttribution* g_backward = nullptr;

std::unique_ptr<at::ObserverContext> on_backward_node(const at::RecordFunction& fn) {
  if (g_backward != nullptr) g_backward->on_node(fn.seqNr());
  return nullptr;
}

class BackwardCallbackScope {
 public:
  explicit BackwardCallbackScope(BackwardAttribution& attribution) {
    g_backward = &attribution;
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&on_backward_node).scopes({at::RecordScope::BACKWARD_FUNCTION}));
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

std::int64_t plain_step(const models::Model& model, const models::Batch& batch, torch::optim::Optimizer& optimizer) {
  optimizer.zero_grad();
  const auto start = Clock::now();
  {
    torch::Tensor loss = model.forward(batch);
    loss.backward();
  }
  optimizer.step();
  return ns_between(start, Clock::now());
}

}  // namespace

StepMeasurement profile_step(const models::Model& model, const models::Batch& batch, MemoryRecorder& recorder,
                             torch::optim::Optimizer* optimizer) {
  StepMeasurement step;
  step.layers.resize(model.layers().size());
  if (optimizer != nullptr) optimizer->zero_grad();

  recorder.set_owner(MemoryRecorder::kNoOwner);
  recorder.reset_peak();
  step.allocated_at_step_start = recorder.allocated();
  ForwardAttribution forward(recorder, step.layers);

  const auto start = Clock::now();
  torch::Tensor loss = model.forward(batch, &forward);
  const auto forward_end = Clock::now();
  step.allocated_at_forward_end = recorder.allocated();
  forward.finish(step.allocated_at_forward_end);
  for (std::size_t i = 0; i < step.layers.size(); ++i) {
    step.layers[i].kept_bytes = recorder.live_bytes_of(static_cast<int>(i));
  }

  {
    BackwardAttribution backward(forward, recorder, step.layers);
    BackwardCallbackScope callbacks(backward);
    backward.begin(static_cast<int>(step.layers.size()) - 1);
    loss.backward();
    backward.end();
  }
  loss = torch::Tensor();
  const auto backward_end = Clock::now();

  if (optimizer != nullptr) {
    recorder.mark();
    const std::int64_t level = recorder.allocated();
    optimizer->step();
    step.optimizer_transient_bytes = recorder.peak_since_mark() - level;
  }
  const auto end = Clock::now();

  step.forward_ns = ns_between(start, forward_end);
  step.backward_ns = ns_between(forward_end, backward_end);
  step.optimizer_ns = ns_between(backward_end, end);
  step.step_ns = ns_between(start, end);
  step.peak_allocated = recorder.peak();
  return step;
}

std::vector<std::vector<bool>> detect_saved_inputs(const models::Model& model, const models::Batch& batch) {
  const auto& layers = model.layers();
  const models::RunContext context = model.context();
  std::vector<std::vector<bool>> saves(layers.size());
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
      torch::Tensor out = layers[i].forward(copies, context);
      const auto graph = out.grad_fn();  // keeps the saved tensors alive while the others go
      out = torch::Tensor();
      copies.clear();
      for (const auto& w : watched) saves[i].push_back(!w.expired());
    }
    outputs[i] = layers[i].forward(inputs, context);
  }
  return saves;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const std::vector<torch::Tensor>& parameters) {
  if (name == "sgd") {
    return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.01).momentum(0.9));
  }
  if (name == "adam") return std::make_unique<torch::optim::Adam>(parameters, torch::optim::AdamOptions(1e-3));
  throw core::InputError("unknown optimizer '" + name + "' (known: sgd, adam)");
}

std::int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  std::int64_t total = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state.get())) {
      total += tensor_bytes(adam->exp_avg()) + tensor_bytes(adam->exp_avg_sq()) + tensor_bytes(adam->max_exp_avg_sq());
    } else if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state.get())) {
      total += tensor_bytes(sgd->momentum_buffer());
    }
  }
  return total;
}

namespace {

void validate(const ProfileOptions& options) {
  if (options.batch_sizes.empty()) throw core::InputError("--batch-sizes: give at least one batch size");
  for (std::size_t i = 0; i < options.batch_sizes.size(); ++i) {
    if (options.batch_sizes[i] <= 0) throw core::InputError("--batch-sizes: batch sizes must be positive");
    if (i > 0 && options.batch_sizes[i] <= options.batch_sizes[i - 1]) {
      throw core::InputError("--batch-sizes: batch sizes must be strictly ascending");
    }
  }
  if (options.warmup_steps < 1) {
    throw core::InputError("--warmup: at least one warm-up step is needed (it allocates the optimizer state)");
  }
  if (options.repeats < 1) throw core::InputError("--repeats: at least one repeat is needed");
  if (options.threads < 0) throw core::InputError("--threads: expected 0 (libtorch's default) or a positive count");
  if (options.device == "cuda") {
    throw core::InputError("--device cuda: this build profiles on the CPU only (the CUDA backend needs a "
                           "CUDA-enabled libtorch and -DHEADROOM_WITH_CUDA=ON)");
  }
  if (options.device != "cpu") throw core::InputError("--device: expected cpu or cuda, got '" + options.device + "'");
}

}  // namespace

core::Trace profile(models::Model& model, const ProfileOptions& options) {
  validate(options);
  if (options.threads > 0) at::set_num_threads(options.threads);
  model.set_training(true);
  const auto parameters = model.parameters();
  auto optimizer = make_optimizer(options.optimizer, parameters);
  const std::size_t layer_count = model.layers().size();

  core::Trace trace;
  trace.model.name = model.name();
  trace.model.config = model.config().values();
  trace.device = cpu_device_info();
  trace.framework = {{"torch", TORCH_VERSION}, {"headroom", HEADROOM_VERSION}};
  trace.optimizer.name = options.optimizer;
  trace.profile = {options.warmup_steps, options.repeats, options.seed, at::get_num_threads(), utc_timestamp_now()};
  trace.batch_sizes = options.batch_sizes;
  trace.layers.resize(layer_count);
  for (std::size_t i = 0; i < layer_count; ++i) {
    const auto& layer = model.layers()[i];
    auto& out = trace.layers[i];
    out.id = static_cast<int>(i);
    out.name = layer.name;
    out.kind = layer.kind;
    out.block = layer.block;
    out.inputs = layer.inputs;
    for (const auto& p : layer.parameters) out.param_bytes += tensor_bytes(p);
  }

  Progress progress;
  progress.total = 1 + static_cast<int>(options.batch_sizes.size()) * (options.warmup_steps + 2 * options.repeats);
  const auto report = [&](const char* phase, std::int64_t batch) {
    progress.phase = phase;
    progress.batch = batch;
    ++progress.step;
    if (options.on_progress) options.on_progress(progress);
  };

  const auto saves = detect_saved_inputs(model, model.make_batch(options.batch_sizes.front(), options.seed));
  for (std::size_t i = 0; i < layer_count; ++i) trace.layers[i].saves_inputs = saves[i];
  report("inputs", options.batch_sizes.front());

  for (const std::int64_t b : options.batch_sizes) {
    const models::Batch batch = model.make_batch(b, options.seed + static_cast<std::uint64_t>(b));
    for (int i = 0; i < options.warmup_steps; ++i) {
      plain_step(model, batch, *optimizer);
      report("warmup", b);
    }
    // Plain and profiled steps alternate, so drift over the run (caches, allocator pools, other
    // load) affects both alike and their ratio is the profiler's overhead.
    std::vector<std::int64_t> plain_ns;
    std::vector<StepMeasurement> runs;
    for (int i = 0; i < options.repeats; ++i) {
      plain_ns.push_back(plain_step(model, batch, *optimizer));
      report("plain", b);
      auto recorder = std::make_shared<MemoryRecorder>(c10::DeviceType::CPU);
      ScopedMemoryRecording recording(recorder);
      runs.push_back(profile_step(model, batch, *recorder, optimizer.get()));
      if (recorder->untracked_frees() != 0) {
        throw std::logic_error("profiled step freed memory allocated before it began; its bytes would be wrong");
      }
      report("profile", b);
    }

    // Bytes do not depend on the values, so every repeat measures the same; times take the median.
    const StepMeasurement& last = runs.back();
    for (std::size_t i = 0; i < layer_count; ++i) {
      std::vector<std::int64_t> fwd, bwd;
      for (const auto& run : runs) {
        fwd.push_back(run.layers[i].fwd_ns);
        bwd.push_back(run.layers[i].bwd_ns);
      }
      core::LayerSample sample{last.layers[i], b};
      sample.fwd_ns = median(fwd);
      sample.bwd_ns = median(bwd);
      trace.layers[i].samples.push_back(sample);
    }

    std::int64_t static_bytes = optimizer_state_bytes(*optimizer);
    for (const auto& p : parameters) static_bytes += tensor_bytes(p) + tensor_bytes(p.grad());
    std::vector<std::int64_t> step_ns, optimizer_ns;
    for (const auto& run : runs) {
      step_ns.push_back(run.step_ns);
      optimizer_ns.push_back(run.optimizer_ns);
    }
    core::StepSample step;
    step.batch = b;
    step.step_ns = median(step_ns);
    step.plain_step_ns = median(plain_ns);
    step.optimizer_ns = median(optimizer_ns);
    step.optimizer_transient_bytes = last.optimizer_transient_bytes;
    step.static_bytes = static_bytes;
    step.input_bytes = batch.bytes();
    // Between steps only the static state and the batch are allocated, so the step's peak is them
    // plus the most the recorder saw above its level at the step's start.
    step.peak_bytes = static_bytes + step.input_bytes + (last.peak_allocated - last.allocated_at_step_start);
    trace.steps.push_back(step);
  }

  std::int64_t param_elements = 0;
  for (const auto& p : parameters) param_elements += p.numel();
  trace.optimizer.state_bytes = optimizer_state_bytes(*optimizer);
  trace.optimizer.state_bytes_per_param =
      param_elements > 0 ? static_cast<double>(trace.optimizer.state_bytes) / static_cast<double>(param_elements) : 0.0;
  return trace;
}

}  // namespace headroom::profiler
