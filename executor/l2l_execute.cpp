#include "executor/l2l_execute.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string_view>

#include <torch/cuda.h>

#include "core/errors.h"
#include "core/l2l_refusal.h"
#include "core/statistics.h"
#include "executor/l2l_runner.h"
#include "executor/machine_timing.h"
#include "executor/plan_runner.h"
#include "executor/step_loop.h"
#include "models/model_source.h"
#include "runtime/budget_allocator.h"
#include "runtime/memory_recorder.h"

namespace headroom::executor {

namespace {

using runtime::BudgetAllocator;

// What L2L does not run with yet, refused before anything is built.
void check_options(const ExecuteOptions& options) {
  if (options.data != "synthetic") throw core::InputError("data: an L2L plan trains on synthetic data only");
  if (options.full_batch_reference) {
    throw core::InputError("full-batch-reference: not implemented for an L2L plan (its gradient check compares the "
                           "L2L step's gradients with the full batch's)");
  }
  if (options.host_limit) {
    throw core::InputError("host-limit: an L2L plan keeps its training state in host memory, outside the budget by design");
  }
  if (options.batchnorm_eval) throw core::InputError("batchnorm-eval: L2L does not run BatchNorm models");
}

// The traced model, built on the host (its parameters are L2L's to place).
models::Model host_model(const core::Trace& trace, std::uint64_t seed) {
  runtime::HostScope host;
  models::Model model = models::build_traced_model(trace, seed);
  model.set_training(true);
  return model;
}

// L2L's accumulated gradients against one full-batch backward of the same model, same
// weights and data, dropout off on both sides; both run before the budget starts.
core::GradientCheck check_gradient(L2LRunner& l2l, models::Model& model, const core::Plan& plan, const core::Trace& trace,
                                   const ExecuteOptions& options, torch::Device device) {
  progress(options, "gradient check");
  core::GradientCheck check;
  model.set_dropout(false);
  const auto batches = make_micro_batches(model, plan.choice.micro_batches, options.seed, device);
  l2l.accumulate(batches, plan.global_batch);
  std::vector<torch::Tensor> l2l_gradients;
  // The stages kept on the device hold their gradients there; the reference runs on the CPU.
  for (const auto& g : l2l.host_gradients()) l2l_gradients.push_back(g.detach().to(torch::kCPU, false, true));
  // Training starts from no gradients.
  for (auto parameter : l2l.host_parameters()) parameter.mutable_grad() = torch::Tensor();
  model.set_dropout(true);

  // In L2L's precision, on its weights: built from the same seed, bfloat16 ones rounded alike.
  models::Model reference = models::build_model(trace.model, options.seed);
  reference.set_precision(trace.precision);
  reference.set_training(true);
  reference.set_dropout(false);
  const models::Batch whole = concatenate(batches).to(torch::kCPU);
  const auto full_batch_gradients = [&] {
    reference.forward(whole).backward();
    return take_gradients(reference.parameters());
  };
  const auto full = full_batch_gradients();
  check.max_rel_diff = max_relative_difference(l2l_gradients, full);
  // As execute's other steps do.
  if (trace.precision != core::Precision::Fp32) compare_with_float32(reference, full_batch_gradients, l2l_gradients, full, check);
  check.computed = true;
  check.note = std::string("L2L (stage by stage, every stage re-run from its stashed inputs, boundaries on the ") +
               (plan.choice.l2l->boundaries_on_host ? "host" : "device") +
               ") against one full-batch backward of the same weights and data, dropout off on both sides";
  return check;
}

// L2L's step under the step loop (step_loop.h): every micro-batch's input made on the device
// before the clock starts, as the plan counts it; per measured step the lanes' times, the device
// side's peak and the host's.
class L2LStep : public StepRunner {
 public:
  struct Lanes {
    std::vector<double> compute, copy, wait, host_optimizer;
  };

  L2LStep(L2LRunner& l2l, Position& position, models::Model& model, const core::Plan& plan,
            const ExecuteOptions& options, torch::Device device, runtime::MemoryRecorder* recorder,
            std::int64_t device_before, std::int64_t host_before, core::L2LReport& l2l_report)
      : l2l_(l2l), position_(position), model_(model), plan_(plan), options_(options), device_(device),
        recorder_(recorder), device_before_(device_before), host_before_(host_before), l2l_report_(l2l_report) {}

  void before_step(int step, bool) override {
    position_.phase = "data";
    batches_.clear();
    batches_ = make_micro_batches(model_, plan_.choice.micro_batches,
                                  step_seed(options_, step, 0), device_);
    synchronize(device_);
    auto& allocator = BudgetAllocator::instance();
    allocator.reset_peak();
    allocator.reset_host_peak();
    recorder_->reset_peak();
  }

  double step(int, bool) override {
    l2l_.step(batches_, plan_.global_batch);
    return 0;
  }

  void after_step(int, bool measured, core::Report& report) override {
    if (!measured) return;
    const L2LRunner::LaneTimes lanes = l2l_.last_step_lanes();
    lanes_.compute.push_back(lanes.compute);
    lanes_.copy.push_back(lanes.copy);
    lanes_.wait.push_back(lanes.wait);
    lanes_.host_optimizer.push_back(lanes.host_optimizer);
    auto& allocator = BudgetAllocator::instance();
    const std::int64_t device_peak = device_.is_cuda() ? recorder_->peak() : allocator.peak() - device_before_;
    report.measured.peak_bytes = std::max(report.measured.peak_bytes, device_peak);
    // What the caching allocator held, blocks a copy stream still used (record_stream) included.
    if (device_.is_cuda()) report.measured_reserved_bytes = std::max(report.measured_reserved_bytes, recorder_->reserved_peak());
    l2l_report_.measured_host_peak_bytes = std::max(l2l_report_.measured_host_peak_bytes, allocator.host_peak() - host_before_);
  }

  const Lanes& lanes() const { return lanes_; }

 private:
  L2LRunner& l2l_;
  Position& position_;
  models::Model& model_;
  const core::Plan& plan_;
  const ExecuteOptions& options_;
  torch::Device device_;
  runtime::MemoryRecorder* recorder_;
  std::int64_t device_before_, host_before_;
  core::L2LReport& l2l_report_;
  std::vector<models::Batch> batches_;
  Lanes lanes_;
};

}  // namespace

bool l2l_takes(const core::Plan& plan) { return plan.choice.l2l.has_value(); }

void execute_l2l(const core::Plan& plan, const core::Trace& trace, const ExecuteOptions& options, torch::Device device,
                   core::Report& report) {
  check_options(options);
  // What the planner refuses (a hand-written plan may still ask): L2L and its gradient check
  // run float32 steps of the zoo's models.
  if (const std::string why = core::l2l_refusal(trace); !why.empty()) {
    throw core::InputError("the plan runs " + trace.model.name + " layer to layer (L2L), which cannot run: " + why);
  }
  auto& allocator = BudgetAllocator::instance();
  // On CUDA the device side is what the caching allocator reports while recording (the copy and
  // optimizer threads record into it too); on the CPU the budget allocator counts it.
  const auto recorder = std::make_shared<runtime::MemoryRecorder>(torch::kCUDA);
  std::optional<runtime::ScopedMemoryRecording> recording;
  if (device.is_cuda()) recording.emplace(recorder);
  BudgetAllocator::clear_last_refusal();
  const std::int64_t host_before = allocator.host_in_use();
  // The device side's zero: the stages kept on the device (from a chosen block on) count from here.
  const std::int64_t device_before = allocator.in_use();
  models::Model model = host_model(trace, options.seed);
  Position position;
  L2LOptions l2l_options;
  l2l_options.device = device;
  l2l_options.optimizer = plan.optimizer.empty() ? trace.optimizer.name : plan.optimizer;
  l2l_options.boundaries_on_host = plan.choice.l2l->boundaries_on_host;
  l2l_options.from_block = plan.choice.l2l->from_block;
  // On the CPU each stage waits for the next one's parameters to land before it computes: the
  // device then holds two stages' parameters at every peak, the bound the plan predicts; a copy
  // landing later would only lower the peak, by chance (a copy is a memcpy, so little overlap is
  // lost). On CUDA the copy overlaps the compute, as L2L means it to, and the plan's peak is a bound.
  l2l_options.settle_prefetch = device.is_cpu();
  L2LRunner l2l(model, l2l_options, position);
  core::L2LReport l2l_report;
  l2l_report.boundaries_on_host = l2l_options.boundaries_on_host;
  l2l_report.stages = l2l.stage_count();
  l2l_report.kept_stages = l2l.kept_stage_count();
  l2l_report.largest_stage_parameter_bytes = l2l.largest_stage_parameter_bytes();
  if (options.gradient_check) report.gradient_check = check_gradient(l2l, model, plan, trace, options, device);

  // The budget counts from before the kept stages' parameters reached the device, as the plan does.
  std::optional<runtime::ScopedBudget> budget;
  time_machine_before_run(options, device, budget, report);
  const std::int64_t kept_bytes = allocator.in_use() - device_before;
  // CUDA's memory is measured, not refused, as in any plan's run on CUDA.
  if (options.enforce_budget && device.is_cpu()) budget.emplace(plan.budget_bytes - kept_bytes);
  report.budget_bytes = budget ? plan.budget_bytes : 0;
  L2LStep step(l2l, position, model, plan, options, device, recorder.get(), device_before, host_before, l2l_report);
  const auto baseline = [&budget, device_before] { return budget ? device_before : std::int64_t{0}; };
  reporting_out_of_memory([&] { run_steps(step, options, device, report); }, position, baseline, report);
  const auto& [compute, copy, wait, host_optimizer] = step.lanes();
  if (!compute.empty()) {
    l2l_report.measured = {core::median(compute), core::median(copy), core::median(wait), core::median(host_optimizer)};
  }
  // Beside the plan's own figures (core/l2l_stages.h); a plan made before plans carried them has
  // none (negative lanes: absent).
  const auto part = [&plan](std::string_view name) { return plan.predicted_part(name).value_or(-1); };
  l2l_report.predicted = {part(core::kL2LComputeSecondsPart), part(core::kL2LCopySecondsPart),
                            part(core::kL2LWaitSecondsPart), part(core::kL2LHostOptimizerSecondsPart)};
  l2l_report.predicted_host_bytes = std::max<std::int64_t>(std::llround(part(core::kL2LHostBytesPart)), 0);
  if (!plan.predicted_part(core::kL2LHostBytesPart)) {
    report.warnings.push_back("the plan carries no prediction of L2L's lanes and host peak (made by an older "
                              "headroom): plan again to compare them");
  }
  report.l2l = l2l_report;
  if (device.is_cpu()) {
    report.warnings.push_back("L2L ran with each stage waiting for the next one's parameters before computing (the peak "
                              "the plan predicts); the device-side peak is what the budget allocator counted outside "
                              "host scopes, the host side is reported apart");
  } else {
    report.warnings.push_back("L2L ran on CUDA with the next stage's parameters copied while a stage computes; the "
                              "device-side peak is what the caching allocator reported (the plan's peak bounds it), "
                              "the host's pinned buffers are not counted");
  }
}

}  // namespace headroom::executor
