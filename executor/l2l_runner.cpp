#include "executor/l2l_runner.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <unordered_map>

#include <ATen/ThreadLocalState.h>

#include "core/errors.h"
#include "runtime/budget_allocator.h"
#include "runtime/optimizer.h"
#include "runtime/tensor_bytes.h"

namespace headroom::executor {

namespace {

using runtime::BudgetAllocator;
using runtime::HostScope;

struct CarriedRefusal {
  runtime::Refusal refusal;
};

// Work for a copy or optimizer thread, run in the launching thread's state: its memory recording
// above all, which on CUDA measures the device side.
template <typename F>
auto in_launcher_state(F work) {
  return [work = std::move(work), state = at::ThreadLocalState()]() mutable {
    at::ThreadLocalStateGuard launcher(state);
    return work();
  };
}

// A refusal on a worker thread is recorded on that thread; carry it to the one that reports it.
template <typename F>
auto carrying_refusal(F work) {
  return [work = std::move(work)]() mutable {
    try {
      return work();
    } catch (const c10::OutOfMemoryError&) {
      const runtime::Refusal refusal = BudgetAllocator::last_refusal();
      throw CarriedRefusal{refusal};
    }
  };
}

}  // namespace

L2LRunner::L2LRunner(models::Model& model, L2LOptions options, Position& position)
    : model_(model), options_(std::move(options)), position_(position), link_(options_.device) {
  if (link_.is_cuda() && options_.copy_bytes_per_second > 0) {
    throw core::InputError("l2l: an emulated copy rate slows the CPU's copies only; CUDA's run at the link's own rate");
  }
  slots_ = model.parameters();
  const std::vector<int> owner = assign_parameters(form_stages());
  // The host copies and their optimizers; the model's own storage goes. A offloaded stage's parameters
  // are packed into one host buffer (the masters view it), so a stage crosses the link in one copy
  // each way, as the planner times it (one latency per copy), and not in one per tensor. A kept
  // stage's parameters are copied out of wherever the model was built (the host, in execute) onto
  // the device. On CUDA the host buffers are pinned.
  torch::NoGradGuard no_grad;
  // Buffers (running statistics, masks) are read by the compute and updated in place: they stay on
  // the device; on the CPU that is where the model was built.
  if (link_.is_cuda()) {
    for (auto buffer : model_.buffers()) {
      buffer.set_data(buffer.detach().to(buffer.options().device(link_.device()), /*non_blocking=*/false, /*copy=*/true));
    }
  }
  place_kept_parameters(owner);
  for (auto& stage : stages_) {
    if (stage.kept || stage.parameters.empty()) continue;
    pack_on_host(stage);
  }
  build_optimizers();
}

std::vector<int> L2LRunner::form_stages() {
  // Formed as the planner forms them from the trace (core/l2l_stages.h).
  std::vector<int> blocks;
  std::vector<std::vector<int>> inputs;
  for (const auto& layer : model_.layers()) {
    blocks.push_back(layer.block);
    inputs.push_back(layer.inputs);
  }
  core::L2LStages formed = core::l2l_stages(blocks, inputs);
  for (auto& stage : formed.stages) {
    stages_.emplace_back();
    static_cast<core::L2LStage&>(stages_.back()) = std::move(stage);
  }
  first_reader_stage_ = std::move(formed.first_reader);
  const int first_offloaded = core::first_offloaded_stage(stages_, blocks, options_.from_block);
  if (first_offloaded < 0) {
    throw core::InputError("l2l.from_block: the model has no block " + std::to_string(options_.from_block) +
                           ", so L2L cannot start there");
  }
  for (int s = 0; s < first_offloaded; ++s) stages_[static_cast<std::size_t>(s)].kept = true;
  return std::move(formed.stage_of);
}

std::vector<int> L2LRunner::assign_parameters(const std::vector<int>& stage_of) {
  const auto& layers = model_.layers();
  std::unordered_map<const void*, int> index_of;
  for (std::size_t i = 0; i < slots_.size(); ++i) index_of[slots_[i].unsafeGetTensorImpl()] = static_cast<int>(i);
  std::vector<int> owner(slots_.size(), -1);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const int s = stage_of[i];
    for (const auto& p : layers[i].parameters) {
      const auto it = index_of.find(p.unsafeGetTensorImpl());
      if (it == index_of.end()) continue;  // not trained (not among the model's parameters)
      int& o = owner[static_cast<std::size_t>(it->second)];
      if (o >= 0 && o != s) {
        throw core::InputError("l2l: layer " + layers[i].name + " shares a parameter with a layer of another stage "
                               "(tied weights); L2L keeps each stage's parameters apart");
      }
      if (o < 0) stages_[static_cast<std::size_t>(s)].parameters.push_back(it->second);
      o = s;
    }
  }
  for (std::size_t i = 0; i < owner.size(); ++i) {
    if (owner[i] < 0) {
      throw core::InputError("l2l: the model has a parameter that belongs to no layer, so no stage would load it");
    }
  }
  return owner;
}

void L2LRunner::place_kept_parameters(const std::vector<int>& owner) {
  masters_.resize(slots_.size());
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    auto& slot = slots_[i];
    slot.mutable_grad() = torch::Tensor();
    if (stages_[static_cast<std::size_t>(owner[i])].kept) {
      slot.set_data(slot.detach().to(slot.options().device(link_.device()), /*non_blocking=*/false, /*copy=*/true));
      masters_[i] = slot;
    }
  }
}

void L2LRunner::pack_on_host(Stage& stage) {
  const auto& layers = model_.layers();
  const auto& first = slots_[static_cast<std::size_t>(stage.parameters.front())];
  std::int64_t elements = 0;
  for (const int p : stage.parameters) {
    const auto& slot = slots_[static_cast<std::size_t>(p)];
    if (slot.scalar_type() != first.scalar_type()) {
      throw core::InputError("l2l: layers " + layers[static_cast<std::size_t>(stage.first)].name + ".." +
                             layers[static_cast<std::size_t>(stage.last)].name + " mix parameter types (" +
                             std::string(c10::toString(first.scalar_type())) + ", " +
                             std::string(c10::toString(slot.scalar_type())) +
                             "); L2L copies a stage's parameters as one buffer of one type");
    }
    stage.offsets.push_back(elements);
    stage.shapes.push_back(slot.sizes().vec());
    elements += slot.numel();
  }
  stage.host_flat = link_.host_empty({elements}, first.options());
  HostScope host;
  const auto views = stage.views(stage.host_flat);
  for (std::size_t k = 0; k < views.size(); ++k) {
    const auto p = static_cast<std::size_t>(stage.parameters[k]);
    views[k].copy_(slots_[p]);
    masters_[p] = views[k].requires_grad_(true);
    slots_[p].set_data(torch::empty({0}, slots_[p].options()));
  }
}

void L2LRunner::build_optimizers() {
  for (auto& stage : stages_) {
    if (stage.parameters.empty()) continue;
    std::vector<torch::Tensor> own;
    for (const int p : stage.parameters) own.push_back(masters_[static_cast<std::size_t>(p)]);
    std::optional<HostScope> host;
    if (!stage.kept) host.emplace();
    stage.optimizer = runtime::make_optimizer(options_.optimizer, own);
  }
}

std::vector<torch::Tensor> L2LRunner::Stage::views(const torch::Tensor& flat) const {
  std::vector<torch::Tensor> out;
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    std::int64_t elements = 1;
    for (const auto d : shapes[k]) elements *= d;
    out.push_back(flat.narrow(0, offsets[k], elements).view(shapes[k]));
  }
  return out;
}

L2LRunner::~L2LRunner() {
  // Outstanding work must not outlive the tensors it touches; its errors no longer matter.
  if (prefetch_.valid()) prefetch_.wait();
  for (auto& f : optimizer_steps_) {
    if (f.valid()) f.wait();
  }
}

int L2LRunner::kept_stage_count() const {
  return static_cast<int>(std::count_if(stages_.begin(), stages_.end(), [](const Stage& s) { return s.kept; }));
}

std::int64_t L2LRunner::largest_stage_parameter_bytes() const {
  std::int64_t largest = 0;
  for (const auto& stage : stages_) {
    if (stage.kept) continue;
    std::int64_t bytes = 0;
    for (const int p : stage.parameters) bytes += runtime::tensor_bytes(masters_[static_cast<std::size_t>(p)]);
    largest = std::max(largest, bytes);
  }
  return largest;
}

std::vector<torch::Tensor> L2LRunner::host_gradients() const {
  std::vector<torch::Tensor> grads;
  for (const auto& m : masters_) grads.push_back(m.grad().defined() ? m.grad() : torch::zeros_like(m));
  return grads;
}

torch::Tensor L2LRunner::copy_to_device(int stage) const {
  const Timed timed(copy_ns_);
  const auto start = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  const auto& flat = stages_[static_cast<std::size_t>(stage)].host_flat;
  if (!flat.defined()) return {};  // a stage without parameters
  torch::Tensor copy = link_.to_device_landed(flat);
  at_link_rate(start, runtime::tensor_bytes(copy));
  return copy;
}

void L2LRunner::at_link_rate(std::chrono::steady_clock::time_point start, std::int64_t bytes) const {
  // A slower link, emulated: the copy takes at least what the bytes take at that bandwidth.
  if (options_.copy_bytes_per_second <= 0) return;
  const std::chrono::duration<double> at_bandwidth(static_cast<double>(bytes) / options_.copy_bytes_per_second);
  std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(at_bandwidth));
}

torch::Tensor L2LRunner::from_stash(const torch::Tensor& tensor) const {
  if (!options_.boundaries_on_host) return tensor;
  const Timed timed(copy_ns_);
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor copy = link_.back_to_device(tensor);
  at_link_rate(start, runtime::tensor_bytes(copy));
  return copy;
}

void L2LRunner::add_to_stash(torch::Tensor& stashed, const torch::Tensor& gradient) const {
  // On CUDA a host stash cannot take a device tensor (and may still be arriving): add on the device.
  if (link_.is_cuda() && options_.boundaries_on_host) {
    stashed = to_stash(from_stash(stashed).add_(gradient));
  } else {
    stashed.add_(gradient);
  }
}

void L2LRunner::start_prefetch(int stage, const std::shared_ptr<c10::Event>& after) {
  if (!options_.prefetch || stage < 0 || stage >= stage_count() || stages_[static_cast<std::size_t>(stage)].kept) return;
  if (prefetch_.valid()) {
    const Timed timed(wait_ns_);
    prefetch_.wait();
  }
  prefetching_ = stage;
  if (options_.settle_prefetch && !link_.is_cuda()) {
    // The compute waits for this copy anyway: on a copy thread it would only add the thread's start
    // and join to the wait, a share of a small CPU step worth avoiding (docs/design.md, "L2L"). Made
    // here, it is a copy, as the planner times it, and no wait.
    std::promise<torch::Tensor> landed;
    try {
      landed.set_value(carrying_refusal([this, stage] { return copy_to_device(stage); })());
    } catch (...) {
      landed.set_exception(std::current_exception());
    }
    prefetch_ = landed.get_future();
    return;
  }
  // No host optimizer step touches this stage meanwhile: in backward the stage prefetched is the one
  // before those being stepped, and a step's forward starts after every step has finished.
  prefetch_ = std::async(std::launch::async, in_launcher_state(carrying_refusal([this, stage, after] {
                           wait_for(after);
                           return copy_to_device(stage);
                         })));
  if (options_.settle_prefetch) {
    const Timed timed(wait_ns_);
    prefetch_.wait();
  }
}

void L2LRunner::load(int stage) {
  auto& s = stages_[static_cast<std::size_t>(stage)];
  if (s.kept) return;
  torch::Tensor copy;
  if (prefetching_ == stage && prefetch_.valid()) {
    prefetching_ = -1;
    try {
      const Timed timed(wait_ns_);
      copy = prefetch_.get();
    } catch (const CarriedRefusal& carried) {
      BudgetAllocator::set_last_refusal(carried.refusal);
      position_.layer = model_.layers()[static_cast<std::size_t>(stages_[static_cast<std::size_t>(stage)].first)].name;
      position_.phase = "prefetch";
      throw c10::OutOfMemoryError({__func__, __FILE__, __LINE__}, "headroom budget: prefetching a stage's parameters");
    }
  } else {
    copy = copy_to_device(stage);
  }
  if (!copy.defined()) return;
  s.device_flat = copy;
  const auto views = s.views(copy);
  for (std::size_t k = 0; k < views.size(); ++k) slots_[static_cast<std::size_t>(s.parameters[k])].set_data(views[k]);
}

void L2LRunner::unload(int stage) {
  auto& s = stages_[static_cast<std::size_t>(stage)];
  if (s.kept) return;
  for (const int p : s.parameters) {
    auto& slot = slots_[static_cast<std::size_t>(p)];
    slot.mutable_grad() = torch::Tensor();
    slot.set_data(torch::empty({0}, slot.options()));
  }
  s.device_flat = torch::Tensor();
  s.device_gradients = torch::Tensor();
}

void L2LRunner::offload_gradients_and_step(int stage, bool optimize) {
  auto& s = stages_[static_cast<std::size_t>(stage)];
  if (s.kept) {
    // Stepped where it lives, on the compute thread, as ordinary training steps; the gradients go
    // once used (kept for accumulate(), which reads them). Its time is the compute lane's, as the
    // planner counts it (left untimed, the measured compute lane falls short of the predicted one:
    // docs/design.md, "L2L").
    if (!optimize || !s.optimizer) return;
    const Timed timed(compute_ns_);
    s.optimizer->step();
    for (const int p : s.parameters) slots_[static_cast<std::size_t>(p)].mutable_grad() = torch::Tensor();
    return;
  }
  // One copy to the host (landed on return on the CPU, in flight on CUDA until the host thread
  // that takes it waits); gradients already there (a step after accumulate(), whose gradients
  // nobody cleared) are added to.
  std::optional<HostLanding> arriving;
  if (s.device_gradients.defined()) {
    const Timed timed(copy_ns_);
    arriving = link_.to_host(s.device_gradients);
  }
  gradients_sent_[static_cast<std::size_t>(stage)] = arriving ? arriving->landed : nullptr;
  auto deliver = [this, &s](const HostLanding& landing) {
    {
      const Timed timed(wait_ns_);
      landing.wait();
    }
    const Timed timed(host_optimizer_ns_);
    HostScope host;
    torch::NoGradGuard no_grad;
    const auto arrived = s.views(landing.host);
    for (std::size_t k = 0; k < arrived.size(); ++k) {
      auto& master = masters_[static_cast<std::size_t>(s.parameters[k])];
      if (master.grad().defined()) {
        master.mutable_grad().add_(arrived[k]);
      } else {
        master.mutable_grad() = arrived[k];
      }
    }
  };
  if (arriving && !arriving->landed) {
    deliver(*arriving);
    arriving.reset();
  }
  unload(stage);  // the device copies and gradients go (on CUDA once the outbound copy has read them)
  const bool stepping = optimize && s.optimizer;
  if (!arriving && !stepping) return;
  auto work = [this, &s, arriving, stepping, deliver] {
    if (arriving) deliver(*arriving);
    if (!stepping) return;
    const Timed timed(host_optimizer_ns_);
    HostScope host;
    s.optimizer->step();
    for (const int p : s.parameters) masters_[static_cast<std::size_t>(p)].mutable_grad() = torch::Tensor();
  };
  // On a CPU the host step runs on the compute thread, before the next stage: it shares the
  // compute's cores, so running beside it gains nothing, and then the host's peak (a stage's
  // gradients and step temporaries on top of the boundaries waiting there) does not depend on
  // which of the two threads gets ahead: the plan's host figure is reached, not just bounded.
  if (options_.overlap_optimizer && link_.is_cuda()) {
    // One stage's host step at a time, in order, as the planner's host-optimizer lane runs them:
    // steps started side by side would share the host's cores and the memory bandwidth anyway.
    std::shared_future<void> previous = optimizer_steps_.empty() ? std::shared_future<void>() : optimizer_steps_.back();
    auto in_turn = [previous, work] {
      if (previous.valid()) previous.wait();
      work();
    };
    optimizer_steps_.push_back(std::async(std::launch::async, in_launcher_state(in_turn)).share());
  } else {
    work();
  }
}

void L2LRunner::wait_for_optimizer() {
  const Timed timed(wait_ns_);
  for (auto& f : optimizer_steps_) f.get();
  optimizer_steps_.clear();
}

torch::Tensor L2LRunner::to_stash(const torch::Tensor& tensor) const {
  if (!options_.boundaries_on_host) return tensor;
  const Timed timed(copy_ns_);
  return link_.stash_to_host(tensor);
}

torch::Tensor L2LRunner::run_stage(const Stage& stage, const models::Batch& batch, std::vector<torch::Tensor>& outputs,
                                  bool recomputing) {
  const Timed timed(compute_ns_);
  const auto& layers = model_.layers();
  const auto& last_readers = model_.last_readers();
  models::RunContext context = model_.context();
  context.recomputing = recomputing;
  for (int i = stage.first; i <= stage.last; ++i) {
    const auto& layer = layers[static_cast<std::size_t>(i)];
    position_.layer = layer.name;
    outputs[static_cast<std::size_t>(i)] = layer.run(models::gather_inputs(layer, batch, outputs), context);
    // Outputs read only inside the stage go after their last reader, as an eager framework would.
    for (const int j : layer.inputs) {
      if (j >= stage.first && last_readers[static_cast<std::size_t>(j)] == i &&
          std::find(stage.exports.begin(), stage.exports.end(), j) == stage.exports.end()) {
        outputs[static_cast<std::size_t>(j)] = torch::Tensor();
      }
    }
  }
  return outputs[static_cast<std::size_t>(stage.last)];
}

double L2LRunner::step(const std::vector<models::Batch>& micro_batches, std::int64_t global_batch) {
  compute_ns_ = copy_ns_ = wait_ns_ = host_optimizer_ns_ = 0;
  return run(micro_batches, global_batch, true);
}

double L2LRunner::accumulate(const std::vector<models::Batch>& micro_batches, std::int64_t global_batch) {
  for (auto& m : masters_) m.mutable_grad() = torch::Tensor();
  return run(micro_batches, global_batch, false);
}

// One step's state between its phases: per micro-batch the outputs later stages read (stashed) and
// the gradients arriving at them, and each stage's RNG state at its forward.
class L2LRunner::Step {
 public:
  Step(L2LRunner& l2l, const std::vector<models::Batch>& micro_batches, std::int64_t global_batch)
      : l2l_(l2l),
        micro_batches_(micro_batches),
        global_batch_(global_batch),
        layer_count_(l2l.model_.layers().size()),
        last_stage_(l2l.stage_count() - 1),
        stash_(micro_batches.size(), std::vector<torch::Tensor>(layer_count_)),
        grads_(micro_batches.size(), std::vector<torch::Tensor>(layer_count_)),
        rng_(static_cast<std::size_t>(l2l.stage_count()), std::vector<torch::Tensor>(micro_batches.size())),
        generator_(at::globalContext().defaultGenerator(l2l.link_.device())) {}

  // Stage by stage, every micro-batch, nothing kept for backward but the stash.
  void forward() {
    l2l_.gradients_sent_.assign(l2l_.stages_.size(), nullptr);
    l2l_.start_prefetch(0);
    for (int s = 0; s <= last_stage_; ++s) forward_stage(s);
  }

  // Stages in reverse, each re-run from its stashed inputs with the forward's RNG state.
  void backward(bool optimize) {
    for (int s = last_stage_; s >= 0; --s) backward_stage(s, optimize);
  }

  double loss() const { return loss_total_; }

 private:
  void forward_stage(int s) {
    const Stage& stage = l2l_.stages_[static_cast<std::size_t>(s)];
    l2l_.load(s);
    l2l_.start_prefetch(s < last_stage_ ? s + 1 : -1, before_running_);
    for (std::size_t m = 0; m < micro_batches_.size(); ++m) forward_micro_batch(stage, s, m);
    before_running_ = l2l_.link_.mark_compute();
    // The last stage stays: backward starts with it.
    if (s < last_stage_) l2l_.unload(s);
  }

  void forward_micro_batch(const Stage& stage, int s, std::size_t m) {
    l2l_.position_.phase = "forward";
    l2l_.position_.micro_batch = static_cast<int>(m);
    {
      HostScope host;
      rng_[static_cast<std::size_t>(s)][m] = generator_.get_state();
    }
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> outputs(layer_count_);
    // The CPU computes on a host stash where it lies; a GPU needs it brought back first.
    for (const int j : stage.inputs) {
      const torch::Tensor& stashed = stash_[m][static_cast<std::size_t>(j)];
      outputs[static_cast<std::size_t>(j)] = l2l_.link_.is_cuda() ? l2l_.from_stash(stashed) : stashed;
    }
    const torch::Tensor out = l2l_.run_stage(stage, micro_batches_[m], outputs, false);
    for (const int j : stage.exports) {
      stash_[m][static_cast<std::size_t>(j)] = l2l_.to_stash(outputs[static_cast<std::size_t>(j)]);
    }
    if (s == last_stage_) {
      loss_total_ += out.item<double>() * static_cast<double>(micro_batches_[m].size()) / static_cast<double>(global_batch_);
    }
  }

  void backward_stage(int s, bool optimize) {
    Stage& stage = l2l_.stages_[static_cast<std::size_t>(s)];
    if (s < last_stage_) l2l_.load(s);
    l2l_.start_prefetch(s - 1, before_running_);
    create_gradients(stage, s);
    for (std::size_t m = 0; m < micro_batches_.size(); ++m) backward_micro_batch(stage, s, m);
    before_running_ = l2l_.link_.mark_compute();
    l2l_.position_.phase = "gradient offload";
    l2l_.offload_gradients_and_step(s, optimize);
  }

  // The stage's gradients exist before its first backward, as in the step the profiler measured
  // (it accumulated into gradients already there): autograd then adds into them in place and
  // never holds a new gradient beside the op's temporaries, so the planner's walk bounds the peak.
  void create_gradients(Stage& stage, int s) {
    torch::NoGradGuard no_grad;
    l2l_.position_.phase = "gradients";
    // Zeroing is compute-thread work the planner counts with the optimizer's (what a step pays
    // once): timed in the compute lane, beside the kept stages' steps.
    if (stage.kept) {
      const Timed timed(l2l_.compute_ns_);
      // Gradients an accumulate() left are added to, as the offloaded stages' are on the host.
      for (const int p : stage.parameters) {
        auto& slot = l2l_.slots_[static_cast<std::size_t>(p)];
        if (!slot.grad().defined()) slot.mutable_grad() = torch::zeros_like(slot);
      }
    } else if (stage.device_flat.defined()) {
      // On CUDA the gradients of two stages back must have left the device first: the device then
      // holds this stage's and, still crossing, the previous one's, as the planner counts them.
      if (s + 2 <= last_stage_) {
        const Timed timed(l2l_.wait_ns_);
        wait_for(l2l_.gradients_sent_[static_cast<std::size_t>(s + 2)]);
      }
      // One buffer, as the parameters: the stage's gradients go to the host in one copy.
      const Timed timed(l2l_.compute_ns_);
      stage.device_gradients = torch::zeros_like(stage.device_flat);
      const auto views = stage.views(stage.device_gradients);
      for (std::size_t k = 0; k < views.size(); ++k) {
        l2l_.slots_[static_cast<std::size_t>(stage.parameters[k])].mutable_grad() = views[k];
      }
    }
  }

  // Each tensor goes as soon as nothing later needs it: the recomputed outputs before the backward,
  // its roots and seeds after it, the inputs' gradients once stashed.
  void backward_micro_batch(const Stage& stage, int s, std::size_t m) {
    l2l_.position_.phase = "recompute";
    l2l_.position_.micro_batch = static_cast<int>(m);
    std::vector<torch::Tensor> outputs(layer_count_);
    std::vector<torch::Tensor> leaves = stashed_inputs_as_leaves(stage, m, outputs);
    torch::Tensor out = recompute(stage, s, m, outputs);
    l2l_.position_.phase = "backward";
    std::vector<torch::Tensor> roots, seeds;
    if (s == last_stage_) {
      roots.push_back(out);
      seeds.push_back(torch::full_like(out, static_cast<double>(micro_batches_[m].size()) /
                                                static_cast<double>(global_batch_)));
    }
    for (const int j : stage.exports) {
      auto& g = grads_[m][static_cast<std::size_t>(j)];
      const auto& o = outputs[static_cast<std::size_t>(j)];
      if (g.defined() && o.requires_grad()) {
        roots.push_back(o);
        seeds.push_back(l2l_.from_stash(g));
      }
      g = torch::Tensor();
    }
    outputs.clear();
    out = torch::Tensor();
    if (!roots.empty() && std::any_of(roots.begin(), roots.end(), [](const auto& r) { return r.requires_grad(); })) {
      const Timed timed(l2l_.compute_ns_);
      torch::autograd::backward(roots, seeds);
    }
    roots.clear();
    seeds.clear();
    stash_input_gradients(stage, m, leaves);
    leaves.clear();
    // A stashed output is needed until its earliest reader has run backward.
    for (const int j : stage.inputs) {
      if (l2l_.first_reader_stage_[static_cast<std::size_t>(j)] == s) stash_[m][static_cast<std::size_t>(j)] = torch::Tensor();
    }
  }

  // The stage's stashed inputs, back on the device, as leaves whose gradients backward fills (the
  // floating ones); placed in `outputs` for the stage to read.
  std::vector<torch::Tensor> stashed_inputs_as_leaves(const Stage& stage, std::size_t m, std::vector<torch::Tensor>& outputs) {
    std::vector<torch::Tensor> leaves;
    for (const int j : stage.inputs) {
      const torch::Tensor& stashed = stash_[m][static_cast<std::size_t>(j)];
      torch::Tensor leaf = l2l_.from_stash(stashed).detach();
      if (stashed.is_floating_point()) leaf.requires_grad_(true);
      outputs[static_cast<std::size_t>(j)] = leaf;
      leaves.push_back(leaf);
    }
    return leaves;
  }

  // The stage's forward again, with grad, under the RNG state its forward had (dropout draws the
  // same masks); the generator resumes where it was.
  torch::Tensor recompute(const Stage& stage, int s, std::size_t m, std::vector<torch::Tensor>& outputs) {
    struct RngRestore {
      at::Generator generator;
      torch::Tensor resume;
      ~RngRestore() { generator.set_state(resume); }
    } restore{generator_, generator_.get_state()};
    generator_.set_state(rng_[static_cast<std::size_t>(s)][m]);
    torch::AutoGradMode grad_mode(true);
    return l2l_.run_stage(stage, micro_batches_[m], outputs, true);
  }

  // The gradients backward left on the stage's inputs, stashed for the stages that made them.
  void stash_input_gradients(const Stage& stage, std::size_t m, const std::vector<torch::Tensor>& leaves) {
    for (std::size_t k = 0; k < stage.inputs.size(); ++k) {
      const int j = stage.inputs[k];
      const torch::Tensor g = leaves[k].grad();
      if (!g.defined()) continue;
      auto& into = grads_[m][static_cast<std::size_t>(j)];
      if (!into.defined()) {
        into = l2l_.to_stash(g);
      } else {
        l2l_.add_to_stash(into, g);
      }
    }
  }

  L2LRunner& l2l_;
  const std::vector<models::Batch>& micro_batches_;
  const std::int64_t global_batch_;
  const std::size_t layer_count_;
  const int last_stage_;
  std::vector<std::vector<torch::Tensor>> stash_;  // [micro-batch][layer]
  std::vector<std::vector<torch::Tensor>> grads_;  // [micro-batch][layer]
  std::vector<std::vector<torch::Tensor>> rng_;    // [stage][micro-batch]
  at::Generator generator_;
  double loss_total_ = 0;
  std::shared_ptr<c10::Event> before_running_;  // the device's mark at the end of the stage before the running one
};

double L2LRunner::run(const std::vector<models::Batch>& micro_batches, std::int64_t global_batch, bool optimize) {
  Step step(*this, micro_batches, global_batch);
  step.forward();
  step.backward(optimize);
  position_.phase = "optimizer";
  wait_for_optimizer();
  position_.phase = "idle";
  position_.layer.clear();
  return step.loss();
}

L2LRunner::LaneTimes L2LRunner::last_step_lanes() const {
  const auto seconds = [](const std::atomic<std::int64_t>& ns) { return static_cast<double>(ns.load()) * 1e-9; };
  return {seconds(compute_ns_), seconds(copy_ns_), seconds(wait_ns_), seconds(host_optimizer_ns_)};
}

void L2LRunner::restore_model_parameters() {
  wait_for_optimizer();
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].is_same(masters_[i])) {
      slots_[i].set_data(masters_[i].detach().to(masters_[i].options().device(link_.device()), false, true));
    }
  }
}

}  // namespace headroom::executor
