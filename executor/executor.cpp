#include "executor/executor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include "core/cost_model.h"
#include "core/errors.h"
#include "core/unprofiled_sizes.h"
#include "core/host_memory.h"
#include "core/statistics.h"
#include "core/units.h"
#include "executor/grad_cache.h"
#include "executor/machine_timing.h"
#include "executor/plan_runner.h"
#include "executor/ring_peers.h"
#include "executor/step_loop.h"
#include "executor/step_wrappers.h"
#include "executor/whole_step_runners.h"
#include "models/fashion_mnist.h"
#include "models/model_source.h"
#include "runtime/budget_allocator.h"
#include "runtime/calibration.h"
#include "runtime/host_info.h"
#include "runtime/intra_op_threads.h"
#include "runtime/memory_recorder.h"
#include "runtime/optimizer.h"

namespace headroom::executor {

namespace {

using Clock = std::chrono::steady_clock;
using runtime::BudgetAllocator;
using runtime::ScopedBudget;

void validate(const ExecuteOptions& options) {
  if (options.steps < 1) throw core::InputError("steps: at least one measured step is needed");
  if (options.warmup_steps < 0) throw core::InputError("warmup_steps: expected zero or more steps");
}

torch::Device resolve_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  if (name == "cuda") {
    if (!torch::cuda::is_available()) {
      throw core::InputError("device cuda: no CUDA device is available to this libtorch (it may be a CPU-only build)");
    }
    return torch::kCUDA;
  }
  throw core::InputError("device: expected cpu or cuda, got '" + name + "'");
}

// A rough bound on what the whole batch needs, from the trace: enough to decide whether the
// gradient check's full-batch pass can run at all on this machine.
std::int64_t full_batch_estimate(const core::Trace& trace, std::int64_t batch) {
  const core::CostModel costs(trace);
  std::int64_t bytes = costs.static_bytes() + costs.input_bytes(batch), transient = 0;
  for (std::size_t i = 0; i < costs.layer_count(); ++i) {
    const auto c = costs.layer(i, batch);
    bytes += std::max<std::int64_t>(0, c.fwd_retained_bytes);
    transient = std::max({transient, c.fwd_transient_bytes, c.bwd_transient_bytes});
  }
  // A contrastive loss's B x B logits, their exponentials and gradient, which the per-layer fits
  // (affine in the batch) do not hold.
  if (trace.contrastive_loss) transient = std::max(transient, 4 * 4 * batch * batch);
  return bytes + transient;
}

// What the report says before anything runs: the plan's side and the warnings that still apply.
core::Report start_report(const core::Plan& plan, const std::string& plan_path, const ExecuteOptions& options,
                          torch::Device device) {
  core::Report report;
  report.plan_path = plan_path;
  report.model = plan.model;
  report.device = options.device;
  report.device_name = device.is_cuda() ? "cuda" : runtime::cpu_device_info().name;
  report.global_batch = plan.global_batch;
  report.micro_batches = plan.choice.micro_batches;
  report.checkpointed_blocks = plan.choice.checkpointed_blocks;
  report.precision = plan.precision;
  report.predicted = {plan.predicted.peak_bytes, plan.predicted.step_seconds, plan.predicted.samples_per_second};
  for (const auto& warning : plan.warnings) {
    // Eval-style BatchNorm is the remedy the plan's BatchNorm warning names; it no longer applies.
    if (options.batchnorm_eval && warning.find("BatchNorm") != std::string::npos) continue;
    report.warnings.push_back(warning);
  }
  if (options.batchnorm_eval) {
    report.warnings.push_back("BatchNorm ran in eval style: it normalized with running statistics, so micro-batches "
                              "train exactly like the full batch");
  }
  return report;
}

struct Datasets {
  std::optional<models::LabelledImages> train, test;
};

// A dataset sits in host memory before the run, outside the device budget.
Datasets load_datasets(const ExecuteOptions& options) {
  if (options.data != "synthetic" && options.data != "fashion-mnist") {
    throw core::InputError("data: expected synthetic or fashion-mnist, got '" + options.data + "'");
  }
  Datasets data;
  if (options.data == "fashion-mnist") {
    progress(options, "loading Fashion-MNIST");
    data.train = models::load_fashion_mnist("train");
    data.test = models::load_fashion_mnist("test");
  }
  return data;
}

// The run's memory: recording and, on the CPU, the budget. Both start before the model exists, so
// parameters count too; members are destroyed budget first, recording last.
struct RunMemory {
  RunMemory(const core::Plan& plan, const ExecuteOptions& options, torch::Device device)
      : recorder(std::make_shared<runtime::MemoryRecorder>(device.type())), recording(recorder),
        host_at_start(core::host_memory_usage()) {
    BudgetAllocator::clear_last_refusal();
    if (options.enforce_budget && device.is_cpu()) budget.emplace(plan.budget_bytes);
  }
  std::shared_ptr<runtime::MemoryRecorder> recorder;
  runtime::ScopedMemoryRecording recording;
  std::optional<ScopedBudget> budget;
  core::HostMemoryUsage host_at_start;
};

// What the host holds for the run: the process's resident set after every micro-batch and
// optimizer step, malloc's resident heap after every step (between hand-backs it only grows).
// Measuring is not training: the heap is read once the step's clock has stopped (reading smaps
// takes a millisecond or two, a fifth of an mlp step), and the time the per-micro-batch reads take
// is kept so the step's time can leave it out.
class HostMemoryWatch {
 public:
  explicit HostMemoryWatch(const core::HostMemoryUsage& start) : start_(start) {
    report_.resident_start_bytes = start.resident_bytes;
    report_.heap_start_bytes = start.heap_resident_bytes;
  }
  void sample_resident() {
    const auto start = Clock::now();
    report_.resident_peak_bytes = std::max(report_.resident_peak_bytes, core::resident_bytes());
    sampling_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  }
  // The time sample_resident() has taken so far.
  double sampling_seconds() const { return sampling_seconds_; }
  void sample_heap() {
    const core::HostMemoryUsage now = core::host_memory_usage();
    report_.resident_peak_bytes = std::max(report_.resident_peak_bytes, now.resident_bytes);
    if (now.heap_resident_bytes <= report_.heap_peak_bytes) return;
    report_.heap_peak_bytes = now.heap_resident_bytes;
    report_.heap_free_bytes = std::max<std::int64_t>(now.heap_resident_bytes - now.malloc_in_use_bytes, 0);
  }
  // Where the budget is the host's real limit, malloc's heap is what decides running out (as CUDA's
  // caching allocator's reserve does on a GPU): its growth since the run began must fit the budget
  // too. Beyond it, free heap goes back to the system, although the next step then faults it in again.
  void keep_within(std::int64_t budget_bytes) {
    if (core::host_memory_usage().heap_resident_bytes - start_.heap_resident_bytes <= budget_bytes) return;
    core::release_free_host_memory();
    ++report_.trims;
  }
  const core::HostMemoryReport& report() const { return report_; }
  bool over_budget(std::int64_t budget_bytes) const { return report_.heap_peak_bytes - start_.heap_resident_bytes > budget_bytes; }

 private:
  core::HostMemoryUsage start_;
  core::HostMemoryReport report_;
  double sampling_seconds_ = 0;
};

// A contrastive model micro-batched, or data parallel: its towers run under a gradient cache
// (executor/grad_cache.h); a worker's loss is the ring's over every worker's embeddings.
bool uses_grad_cache(const models::Model& model, const core::Plan& plan) {
  const auto micro_batches = static_cast<std::int64_t>(plan.choice.micro_batches.size());
  return core::caches_contrastive_gradients(micro_batches, plan.choice.workers()) && contrastive_layer(model) >= 0;
}

// The traced model, rebuilt from its source and set up the way the plan runs it.
// Runs each layer as the plan's choice says (the Tempo variant or the standard one).
void use_variants(models::Model& model, const core::StepChoice& choice, bool cuda) {
  for (const auto& step : choice.layers) {
    // The profiler measures Tempo layers only in the precisions they run in.
    if (step.variant == core::LayerVariant::Tempo &&
        !core::tempo_layers_run_in(model.context().precision, cuda)) {
      throw core::InputError("the plan runs layer " + step.name + " as tempo, which runs in " + std::string(core::kTempoLayerPrecisions) +
                             " only; the step runs in " + std::string(core::precision_name(model.context().precision)) +
                             (cuda ? " on cuda" : ""));
    }
    try {
      model.set_variant(step.id, step.variant);
    } catch (const std::invalid_argument& e) {
      throw core::InputError("the plan runs layer " + step.name + " as " + std::string(core::variant_name(step.variant)) +
                             ": " + e.what());
    }
  }
}

models::Model prepare_model(const core::Plan& plan, const core::Trace& trace, const ExecuteOptions& options,
                            torch::Device device, const std::optional<models::LabelledImages>& train) {
  models::Model model = models::build_traced_model(trace, options.seed);
  if (!plan.choice.layers.empty() && plan.choice.layers.size() != trace.layers.size()) {
    throw core::InputError("the plan chooses for " + std::to_string(plan.choice.layers.size()) +
                           " layers but the trace has " + std::to_string(trace.layers.size()));
  }
  use_variants(model, plan.choice, device.is_cuda());
  // A contrastive loss runs tiled as the plan says (Inf-CL), or standard.
  if (const int loss = contrastive_layer(model); loss >= 0) {
    model.layers()[static_cast<std::size_t>(loss)].contrastive->tiles = plan.choice.loss_tiles;
  } else if (plan.choice.loss_tiles) {
    throw core::InputError("the plan tiles a contrastive loss, but " + trace.model.name + " has none");
  }
  if (train) models::use_dataset(model, *train);
  model.to(device);
  model.set_training(true);
  model.set_batchnorm_eval(options.batchnorm_eval);
  return model;
}

// Everything a planned step runs with. Built in place: the runner and the optimizer hold on to the
// model and its parameters. What wraps the step (step_wrappers.h: data parallel's exchange and ring)
// is attached to the model as it is built.
struct PlannedTraining {
  PlannedTraining(const core::Plan& plan, const core::Trace& trace, const ExecuteOptions& options, torch::Device device,
                  const std::optional<models::LabelledImages>& train, Position& position,
                  std::span<const std::unique_ptr<StepWrapper>> wrappers = {}, core::Report* report = nullptr)
      : model(prepare_model(plan, trace, options, device, train)),
        parameters(model.trainable_parameters()),
        runner(model, plan.choice.checkpointed_blocks, position),
        grad_cache(uses_grad_cache(model, plan)),
        wrappers(wrappers),
        rank(options.rank) {
    if (!wrappers.empty() && report == nullptr) throw std::logic_error("PlannedTraining: step wrappers need the run's report");
    for (const auto& wrapper : wrappers) wrapper->attach(model, *report);
    for (const auto& wrapper : wrappers) {
      if (LayerParameterHooks* hooks = wrapper->layer_hooks()) runner.set_layer_hooks(hooks);
    }
    // What the optimizer steps: the trainable parameters, or a sharded worker's range of them.
    const std::vector<torch::Tensor>* stepped = &parameters;
    for (const auto& wrapper : wrappers) {
      if (const auto* own = wrapper->optimizer_parameters()) stepped = own;
    }
    steps_parameters = stepped == &parameters;
    optimizer = runtime::make_optimizer(plan.optimizer.empty() ? trace.optimizer.name : plan.optimizer, *stepped,
                                        plan.precision == core::Precision::Fp16Autocast
                                            ? std::optional<runtime::LossScaleOptions>(runtime::LossScaleOptions{})
                                            : std::nullopt);
    runner.set_loss_scaler(runtime::loss_scaler_of(*optimizer));
    // The gradient cache runs its own backward passes, which do not scale the loss.
    if (grad_cache && runtime::loss_scaler_of(*optimizer) != nullptr) {
      throw core::InputError("the plan runs a contrastive loss's gradient cache under fp16-autocast, whose loss scaling "
                             "the cache does not run; profile and plan the model in fp32");
    }
  }
  ~PlannedTraining() {
    for (const auto& wrapper : wrappers) wrapper->detach();
  }
  PlannedTraining(const PlannedTraining&) = delete;
  PlannedTraining& operator=(const PlannedTraining&) = delete;

  models::Model model;
  const std::vector<torch::Tensor> parameters;  // the trainable ones: the optimizer's and the gradient check's
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  PlanRunner runner;
  // The step runs under a gradient cache (uses_grad_cache), chosen once.
  const bool grad_cache;
  std::span<const std::unique_ptr<StepWrapper>> wrappers;
  int rank;  // a data-parallel worker's; 0 on one worker
  // The optimizer steps the parameters themselves, not views of them a wrapper keeps (and zeroes).
  bool steps_parameters = true;

  // The next backward is the step's last.
  void before_last_backward(const std::vector<torch::Tensor>& final_already = {}) {
    for (const auto& wrapper : wrappers) wrapper->before_last_backward(final_already);
  }
  // Every micro-batch's backward has run.
  void after_backward() {
    for (const auto& wrapper : wrappers) {
      runner.set_phase(wrapper->phase());
      wrapper->after_backward();
    }
  }
};

std::int64_t samples_of(const std::vector<std::int64_t>& sizes) {
  std::int64_t total = 0;
  for (const auto b : sizes) total += b;
  return total;
}

// A gradient-cache step on a data-parallel worker arms the exchange before its last backward; the
// loss layer's gradient is complete by then.
std::function<void()> arm_before_last_backward(PlannedTraining& training) {
  if (training.wrappers.empty()) return {};
  return [&training] { training.before_last_backward(loss_layer_parameters(training.model)); };
}

// The plan's gradient over this worker's micro-batches (`own`, the first of them the plan's
// micro-batch `first`), accumulated as a step accumulates it; the parameters' gradients are cleared
// before and after.
std::vector<torch::Tensor> planned_gradients(PlannedTraining& training, const core::Plan& plan,
                                             const std::vector<models::Batch>& own, std::int64_t samples,
                                             std::size_t first, torch::Device device) {
  const auto& parameters = training.parameters;
  for (auto& p : parameters) p.mutable_grad() = torch::Tensor();
  for (const auto& wrapper : training.wrappers) wrapper->start_step();
  if (training.grad_cache) {
    // A contrastive model's micro-batches go twice around the loss over the whole batch (the
    // ring's across workers).
    grad_cache_accumulate(training.model, training.runner, own.size(), [&](std::size_t m) { return own[m]; }, samples,
                          device, arm_before_last_backward(training));
  } else {
    for (std::size_t m = 0; m < own.size(); ++m) {
      if (m + 1 == own.size()) training.before_last_backward();
      training.runner.run_micro_batch(own[m], static_cast<int>(first + m), plan.global_batch);
    }
  }
  training.after_backward();
  for (const auto& wrapper : training.wrappers) wrapper->gather_for_check();
  training.runner.set_phase("idle");
  auto accumulated = gradients_of(parameters);
  // Under loss scaling the micro-batches' gradients are the scale's multiple: divided by it (a
  // power of two, exact where nothing overflowed; where something did, the step would be skipped
  // and the comparison reads inf).
  if (const runtime::LossScaler* scaler = runtime::loss_scaler_of(*training.optimizer)) {
    const double scale = scaler->current_scale();
    for (auto& g : accumulated) g.div_(scale);
  }
  for (auto& p : parameters) p.mutable_grad() = torch::Tensor();
  return accumulated;
}

// The full batch's gradients in one pass, in the model's current precision. Under fp16-autocast the
// reference scales its loss as the plan's step does (GradScaler's scale, divided out after):
// unscaled, float16's small gradients underflow to zero and the reference, not the plan, would be
// what differs (docs/results.md, "GPU"). Where the scale overflows the whole batch it is
// halved, as GradScaler backs off. The float32 pass leaves it out.
std::vector<torch::Tensor> full_batch_gradients(models::Model& model, const std::vector<torch::Tensor>& parameters,
                                                const std::vector<models::Batch>& micro,
                                                const runtime::LossScaler* scaler) {
  double scale =
      scaler != nullptr && model.context().precision == core::Precision::Fp16Autocast ? scaler->current_scale() : 1.0;
  const auto finite = [](const std::vector<torch::Tensor>& gradients) {
    return std::all_of(gradients.begin(), gradients.end(),
                       [](const torch::Tensor& g) { return at::isfinite(g).all().item<bool>(); });
  };
  std::vector<torch::Tensor> gradients;
  for (;; scale /= 2) {
    without_ring(model, [&] { (model.forward(concatenate(micro)) * scale).backward(); });
    gradients = take_gradients(parameters);
    if (scale <= 1.0 || finite(gradients)) break;
  }
  if (scale != 1.0) {
    for (auto& g : gradients) g.div_(scale);
  }
  return gradients;
}

// On worker 0 (or the only one): the full batch with the standard layers and loss against the
// plan's `accumulated` gradient, and below fp32 both against float32 where the machine holds it.
// Returns why a precision below fp32 was not set against float32, where it was not.
std::string compare_with_full_batch(PlannedTraining& training, const core::Plan& plan, const ExecuteOptions& options,
                                    torch::Device device, const std::vector<models::Batch>& own,
                                    const std::vector<torch::Tensor>& accumulated, std::int64_t need, std::int64_t host,
                                    core::GradientCheck& check) {
  models::Model& model = training.model;
  const auto micro = plan.choice.data_parallel ? make_micro_batches(model, plan.choice.micro_batches, options.seed, device) : own;
  // The reference runs the standard layers and loss: the planned variants must give the same gradients.
  model.set_all_variants(core::LayerVariant::Standard);
  const int contrastive = contrastive_layer(model);
  if (contrastive >= 0) model.layers()[static_cast<std::size_t>(contrastive)].contrastive->tiles.reset();
  const runtime::LossScaler* scaler = runtime::loss_scaler_of(*training.optimizer);
  const auto reference = [&] { return full_batch_gradients(model, training.parameters, micro, scaler); };
  const auto full = reference();
  check.max_rel_diff = max_relative_difference(accumulated, full);
  std::string float32_note;
  if (model.context().precision != core::Precision::Fp32) {
    // The float32 pass holds about twice a bf16 step's bytes (its activations and gradients float32).
    if (device.is_cpu() && 2 * need > host / 2) {
      float32_note = "; not set against the full batch in float32: it would need about " + core::format_bytes(2 * need) +
                     ", more than half of this machine's memory";
    } else {
      compare_with_float32(model, reference, accumulated, full, check);
    }
  }
  use_variants(model, plan.choice, device.is_cuda());
  if (contrastive >= 0) model.layers()[static_cast<std::size_t>(contrastive)].contrastive->tiles = plan.choice.loss_tiles;
  return float32_note;
}

// What the gradient check set against what, for the report.
std::string gradient_check_note(const PlannedTraining& training, const core::Plan& plan, const core::Trace& trace,
                                const ExecuteOptions& options) {
  bool batchnorm = false;
  for (const auto& layer : trace.layers) batchnorm |= layer.kind.find("batchnorm") != std::string::npos;
  return batchnorm && plan.choice.micro_batches.size() > 1 && !options.batchnorm_eval
             ? "BatchNorm normalizes each micro-batch with its own statistics, so the accumulated gradient differs "
               "from the full batch's by design; dropout off on both sides"
             : training.grad_cache
             ? std::string("gradient-cache gradients (towers micro-batched, the loss over the whole batch ") +
                   (plan.choice.ring_loss ? std::string("as Inf-CL's ring across the workers") +
                                                (plan.choice.loss_tiles ? ", tiled" : "")
                                          : std::string(plan.choice.loss_tiles ? "tiled" : "standard")) +
                   ", checkpointing and Tempo as planned) against the full batch's with standard layers and the "
                   "standard loss, same weights and data, dropout off on both sides"
             : std::string("accumulated micro-batch gradients (loss weights b_i/B, checkpointing and Tempo as "
                           "planned) against the full batch's with standard layers, same weights and data, dropout "
                           "off on both sides") +
                   (batchnorm ? ", BatchNorm with running statistics" : "");
}

// From the initial weights: the plan's accumulated gradient against the full batch's, same data,
// dropout off on both sides so they compute the same function.
core::GradientCheck check_gradient(PlannedTraining& training, const core::Plan& plan, const core::Trace& trace,
                                   const ExecuteOptions& options, torch::Device device, std::optional<ScopedBudget>& budget) {
  core::GradientCheck check;
  std::string float32_note;  // why a precision below fp32 was not set against float32, where it was not
  models::Model& model = training.model;
  const std::int64_t need = full_batch_estimate(trace, plan.global_batch);
  const std::int64_t host = runtime::cpu_device_info().total_memory_bytes;
  if (device.is_cpu() && need > host / 2) {
    check.note = "not computed: the full batch would need about " + core::format_bytes(need) +
                 ", more than half of this machine's memory";
    return check;
  }
  progress(options, "gradient check");
  if (budget) budget->suspend();  // the reference runs without a budget
  model.set_dropout(false);
  {
    // Its batches, gradient copies and comparison are gone before the budget comes back.
    // A data-parallel worker accumulates its share and all-reduces it; worker 0 compares the sum.
    const auto share = plan.choice.worker_micro_batches(training.rank);
    const std::size_t first = plan.choice.first_micro_batch(training.rank);
    const auto own = make_micro_batches(model, share, options.seed, device, first);
    const auto accumulated = planned_gradients(training, plan, own, samples_of(share), first, device);
    // The full batch, on worker 0 only when there are several.
    if (training.rank == 0) {
      float32_note = compare_with_full_batch(training, plan, options, device, own, accumulated, need, host, check);
    }
    for (const auto& wrapper : training.wrappers) wrapper->after_check();
  }
  model.set_dropout(!options.full_batch_reference);
  if (budget) budget->resume();
  check.computed = true;
  check.note = gradient_check_note(training, plan, trace, options) + float32_note;
  return check;
}

// One optimizer step as planned: every micro-batch's forward and backward with gradients
// accumulating, then the optimizer. Between the two is where a data-parallel run all-reduces the
// accumulated gradients; an L2L step replaces the micro-batch loop with its layer-major order.
void train_step(PlannedTraining& training, const core::Plan& plan, const ExecuteOptions& options, int step,
                torch::Device device, HostMemoryWatch* host) {
  // A sharded worker's gradients are views of one buffer, which its wrapper zeroes (start_step).
  if (training.steps_parameters) runtime::zero_gradients_kept(*training.optimizer);
  for (const auto& wrapper : training.wrappers) wrapper->start_step();
  // The last micro-batch's data stays until the optimizer has stepped, as in a training loop (and
  // as the plan counts it).
  std::vector<models::Batch> batch;
  if (training.grad_cache) {
    // A contrastive model's micro-batches run twice around the loss over the whole batch; a
    // data-parallel worker runs its share, the loss over every worker's through the ring.
    const auto sizes = plan.choice.worker_micro_batches(training.rank);
    const std::size_t first = plan.choice.first_micro_batch(training.rank);
    grad_cache_accumulate(
        training.model, training.runner, sizes.size(),
        [&](std::size_t k) {
          return make_micro_batches(training.model, {sizes[k]}, step_seed(options, step, first + k), device).front();
        },
        samples_of(sizes), device, arm_before_last_backward(training));
    if (host != nullptr) host->sample_resident();
  } else {
    // A data-parallel worker runs its share: the global batch's micro-batches first..first+n-1.
    const auto sizes = plan.choice.worker_micro_batches(training.rank);
    const std::size_t first = plan.choice.first_micro_batch(training.rank);
    // Each micro-batch's data is made when its turn comes, as a loader would deliver it, once the
    // previous one's is gone.
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const std::size_t m = first + k;
      training.runner.set_phase("data", static_cast<int>(m));
      batch.clear();
      batch = make_micro_batches(training.model, {sizes[k]}, step_seed(options, step, m), device);
      // The last backward sends each bucket of gradients as it completes.
      if (k + 1 == sizes.size()) training.before_last_backward();
      training.runner.run_micro_batch(batch.front(), static_cast<int>(m), plan.global_batch);
      if (host != nullptr) host->sample_resident();
    }
  }
  training.after_backward();
  training.runner.set_phase("optimizer");
  for (const auto& wrapper : training.wrappers) wrapper->before_optimizer(training.parameters);
  training.optimizer->step();
  for (const auto& wrapper : training.wrappers) wrapper->after_optimizer();
  training.runner.set_phase("idle");
}

// The plain step under the step loop (step_loop.h): its device peak, and on the CPU the host's
// memory; a data-parallel worker's all-reduce waits and its weights checked against the others'.
class PlannedStep : public StepRunner {
 public:
  PlannedStep(PlannedTraining& training, const core::Plan& plan, const ExecuteOptions& options, torch::Device device,
              RunMemory& memory)
      : training_(training), plan_(plan), options_(options), device_(device), memory_(memory),
        host_(memory.host_at_start), host_limit_(memory.budget && options.host_limit) {}

  void before_step(int, bool measured) override {
    memory_.recorder->reset_peak();
    watch_ = measured && device_.is_cpu() ? &host_ : nullptr;
  }

  double step(int step, bool) override {
    const double sampled_before = host_.sampling_seconds();
    train_step(training_, plan_, options_, step, device_, watch_);
    return host_.sampling_seconds() - sampled_before;
  }

  void after_step(int step, bool measured, core::Report& report) override {
    if (watch_ != nullptr) watch_->sample_heap();  // after the optimizer, as the step ends
    if (host_limit_) host_.keep_within(plan_.budget_bytes);
    if (measured) {
      report.measured.peak_bytes = std::max(report.measured.peak_bytes, memory_.recorder->peak());
      report.measured_reserved_bytes = std::max(report.measured_reserved_bytes, memory_.recorder->reserved());
    }
    for (const auto& wrapper : training_.wrappers) wrapper->after_step(training_.parameters, step, measured, report);
  }

  // After the last step: the host's memory over the measured steps.
  void finish(core::Report& report) const {
    if (device_.is_cpu()) report.host_memory = host_.report();
    if (host_limit_ && host_.over_budget(plan_.budget_bytes)) {
      const auto& h = host_.report();
      report.warnings.push_back("malloc's resident heap grew by " + core::format_bytes(h.heap_peak_bytes - h.heap_start_bytes) +
                                ", more than the " + core::format_bytes(plan_.budget_bytes) +
                                " budget (fragmentation): on a host whose memory is the limit this run would not fit");
    }
  }

 private:
  PlannedTraining& training_;
  const core::Plan& plan_;
  const ExecuteOptions& options_;
  torch::Device device_;
  RunMemory& memory_;
  HostMemoryWatch host_;
  HostMemoryWatch* watch_ = nullptr;
  bool host_limit_;
};

// The same steps in one process, each on its whole global batch (the data every worker's micro-
// batches drew, concatenated), from the same initial weights, with dropout off as the run had it:
// how far the run's weights are from these.
double full_batch_reference(PlannedTraining& training, const core::Plan& plan, const core::Trace& trace,
                            const ExecuteOptions& options, torch::Device device, std::optional<ScopedBudget>& budget) {
  progress(options, "full-batch reference");
  if (budget) budget->suspend();  // the reference is not the planned step
  Position position;
  core::Plan standard = plan;
  for (auto& layer : standard.choice.layers) layer.variant = core::LayerVariant::Standard;
  PlannedTraining reference(standard, trace, options, device, std::nullopt, position);
  reference.model.set_dropout(false);
  const int total = options.warmup_steps + options.steps;
  for (int step = 0; step < total; ++step) {
    runtime::zero_gradients_kept(*reference.optimizer);
    std::vector<models::Batch> batches;
    for (std::size_t m = 0; m < plan.choice.micro_batches.size(); ++m) {
      batches.push_back(make_micro_batches(reference.model, {plan.choice.micro_batches[m]}, step_seed(options, step, m), device).front());
    }
    runtime::backward_of(reference.model.forward(concatenate(batches)), *reference.optimizer);
    reference.optimizer->step();
  }
  const double diff = max_relative_difference(training.parameters, reference.parameters);
  if (budget) budget->resume();
  return diff;
}

// The measured figures and their errors against the plan's, from the measured steps.
void summarize(const core::Plan& plan, core::Report& report) {
  report.steps = static_cast<int>(report.step_seconds.size());
  if (report.step_seconds.empty()) return;
  report.measured.step_seconds = core::median(report.step_seconds);
  report.measured.samples_per_second = static_cast<double>(plan.global_batch) / report.measured.step_seconds;
  report.peak_rel_error = core::relative_error(static_cast<double>(report.predicted.peak_bytes),
                                               static_cast<double>(report.measured.peak_bytes));
  report.throughput_rel_error = core::relative_error(report.predicted.samples_per_second, report.measured.samples_per_second);
}

void run_plan(const core::Plan& plan, const core::Trace& trace, const ExecuteOptions& options, torch::Device device,
              const Datasets& data, core::Report& report);

// The intra-op threads the step runs with: the plan's as profiled, unless told; never more than
// this process may use, where the step could not run as it was profiled.
int step_threads(const core::Plan& plan, const core::Trace& trace, const ExecuteOptions& options, torch::Device device) {
  if (options.threads < 0) throw core::InputError("threads: expected 0 (the plan's) or more, got " + std::to_string(options.threads));
  const int profiled = plan.threads > 0 ? plan.threads : trace.profile.threads;
  const int threads = options.threads > 0 ? options.threads : std::max(profiled, 1);
  const int cores = runtime::usable_cores();
  if (!device.is_cuda() && threads > cores) {
    const std::string here = " and this process may use " + std::to_string(cores) + " core(s) here";
    throw core::InputError(options.threads > 0 ? "threads: " + std::to_string(threads) + " asked for," + here
                                               : "threads: the step was profiled at " + std::to_string(threads) +
                                                     " intra-op threads" + here + "; profile the model on this machine, or run with --threads " +
                                                     std::to_string(cores) + " (its times will not be the trace's)");
  }
  return threads;
}

// --full-batch-reference trains with dropout off, so that the steps can equal one process's on the
// full batch. A model with dropout then keeps no masks, and its measured peak is not the planned
// step's: under the prediction by up to the masks' bytes (more or less of them as the peak moves
// with the CPU's kernels).
void note_dropout_off(const core::Trace& trace, const ExecuteOptions& options, core::Report& report) {
  const auto is_dropout = [](const core::LayerProfile& layer) { return layer.kind == "dropout"; };
  if (options.full_batch_reference && std::any_of(trace.layers.begin(), trace.layers.end(), is_dropout)) {
    report.warnings.push_back("--full-batch-reference trained with dropout off: the steps kept none of the dropout "
                              "masks the plan counts, so the measured peak is not the planned step's");
  }
}

void note_unprofiled_sizes(const core::Plan& plan, const core::Trace& trace, core::Report& report) {
  if (auto warning = core::unprofiled_sizes_warning(plan, trace, report)) report.warnings.push_back(std::move(*warning));
}

// What the two calibrations around the run say about the machine, as a warning beside the times.
// (Whether the predicted times are this machine's is the caller's to say: it may rescale them.)
void note_machine_speed(core::Report& report) {
  if (report.calibration_before && report.calibration_after) {
    const core::SpeedRatio moved = core::speed_ratio(*report.calibration_before, *report.calibration_after);
    if (moved.differs) {
      char line[512];
      std::snprintf(line, sizeof line,
                    "the machine's speed moved during the run (matrix products %+.0f%%, convolutions %+.0f%%, memory-bound "
                    "work %+.0f%% from before the warm-up to after the last step): another load shared it, so its times are "
                    "not a fair test of the prediction",
                    100 * (1 / moved.matmul.value_or(moved.compute) - 1), 100 * (1 / moved.conv.value_or(moved.compute) - 1),
                    100 * (1 / moved.memory - 1));
      report.warnings.push_back(line);
    }
  }
}

}  // namespace

core::Report execute(const core::Plan& plan, const core::Trace& measured, const std::string& plan_path,
                     const ExecuteOptions& options) {
  validate(options);
  // A trace of several precisions: the step runs in the plan's, with that one's figures.
  const core::Trace* in_precision = measured.in_precision(plan.precision);
  if (in_precision == nullptr) {
    throw core::InputError(plan_path + ": the plan runs the step in " + std::string(core::precision_name(plan.precision)) +
                           " but its trace was measured in " + measured.precision_list());
  }
  const core::Trace& trace = *in_precision;
  const torch::Device device = resolve_device(options.device);
  // Run in the regime the profiler measured in, and say when the trace was measured in another.
  const std::string regime = core::enter_host_memory_regime();
  core::Report report = start_report(plan, plan_path, options, device);
  report.host_memory_regime = regime;
  if (const std::string warning = core::regime_mismatch_warning(trace.host_memory_regime, regime); !warning.empty()) {
    report.warnings.push_back(warning);
  }
  const Datasets data = load_datasets(options);
  if (options.workers != plan.choice.workers()) {
    throw core::InputError("world_size: the plan is for " + std::to_string(plan.choice.workers()) + " worker(s), got " +
                           std::to_string(options.workers));
  }
  if (options.rank < 0 || options.rank >= options.workers) {
    throw core::InputError("rank: expected from 0 to " + std::to_string(options.workers - 1) + ", got " +
                           std::to_string(options.rank));
  }
  const int threads = step_threads(plan, trace, options, device);
  runtime::use_threads(threads);
  report.threads = threads;
  report.predicted_calibration = plan.calibration ? plan.calibration : trace.calibration;
  run_plan(plan, trace, options, device, data, report);
  if (report.calibration_before) {
    progress(options, "calibration after");
    report.calibration_after = runtime::calibrate(device, 1);
  }
  note_machine_speed(report);
  summarize(plan, report);
  note_unprofiled_sizes(plan, trace, report);
  note_dropout_off(trace, options, report);
  return report;
}

namespace {

void run_plan(const core::Plan& plan, const core::Trace& trace, const ExecuteOptions& options, torch::Device device,
              const Datasets& data, core::Report& report) {
  // A technique that runs the whole step its own way takes the plan (whole_step_runners.h).
  if (const WholeStepRunner* own = whole_step_runner(plan)) {
    own->run(plan, trace, options, device, report);
    return;
  }
  // What wraps the step is made before the budget starts counting: data parallel's process group is
  // not the step's memory.
  const std::vector<std::unique_ptr<StepWrapper>> wrappers = make_step_wrappers(plan, options, device, report);

  RunMemory memory(plan, options, device);
  report.budget_bytes = memory.budget ? plan.budget_bytes : 0;
  Position position;
  position.phase = "model";
  const auto baseline = [&memory] { return memory.budget ? memory.budget->baseline() : std::int64_t{0}; };
  const bool outside_budget = std::any_of(wrappers.begin(), wrappers.end(), [](const auto& w) { return w->builds_model_outside_budget(); });
  reporting_out_of_memory(
      [&] {
        if (outside_budget && memory.budget) memory.budget->suspend();
        PlannedTraining training(plan, trace, options, device, data.train, position, wrappers, &report);
        if (outside_budget && memory.budget) memory.budget->resume();
        if (options.full_batch_reference) training.model.set_dropout(false);
        if (options.gradient_check) report.gradient_check = check_gradient(training, plan, trace, options, device, memory.budget);
        time_machine_before_run(options, device, memory.budget, report);
        PlannedStep step(training, plan, options, device, memory);
        run_steps(step, options, device, report);
        step.finish(report);
        if (const runtime::LossScaler* scaler = runtime::loss_scaler_of(*training.optimizer)) {
          if (scaler->skipped_steps() > 0) {
            report.warnings.push_back("loss scaling skipped " + std::to_string(scaler->skipped_steps()) + " of " +
                                      std::to_string(options.warmup_steps + options.steps) +
                                      " steps (inf or NaN gradients at the scale); the scale is now " +
                                      std::to_string(scaler->current_scale()));
          }
        }
        // The measured steps are over: what follows (a wrapper gathering the whole model back) is not the plan's.
        if (memory.budget) memory.budget->suspend();
        for (const auto& wrapper : wrappers) wrapper->after_run(plan, report);
        if (options.full_batch_reference && training.rank == 0) {
          const double diff = full_batch_reference(training, plan, trace, options, device, memory.budget);
          if (!report.data_parallel) report.data_parallel = core::DataParallelReport{};
          report.data_parallel->full_batch_weights_max_rel_diff = diff;
        }
        if (data.test) {
          progress(options, "test accuracy");
          if (memory.budget) memory.budget->suspend();  // evaluation is not part of the planned step
          report.test_accuracy = models::accuracy(training.model, *data.test);
          report.data = "fashion-mnist";
        }
      },
      position, baseline, report);
}

}  // namespace

}  // namespace headroom::executor
