#include "executor/executor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/cost_model.h"
#include "core/errors.h"
#include "core/units.h"
#include "executor/budget_allocator.h"
#include "executor/plan_runner.h"
#include "models/fashion_mnist.h"
#include "models/zoo.h"
#include "profiler/host_info.h"
#include "profiler/memory_recorder.h"
#include "profiler/profiler.h"

namespace headroom::executor {

namespace {

using Clock = std::chrono::steady_clock;

double relative_error(double predicted, double measured) {
  return measured != 0 ? std::fabs(predicted - measured) / std::fabs(measured) : 0.0;
}

torch::Device resolve_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  if (name == "cuda") {
    if (!torch::cuda::is_available()) {
      throw core::InputError("--device cuda: no CUDA device is available to this libtorch (it may be a CPU-only build)");
    }
    return torch::kCUDA;
  }
  throw core::InputError("--device: expected cpu or cuda, got '" + name + "'");
}

void synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize();
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
  return bytes + transient;
}

}  // namespace

core::Report execute(const core::Plan& plan, const core::Trace& trace, const std::string& plan_path,
                     const ExecuteOptions& options) {
  if (options.steps < 1) throw core::InputError("--steps: at least one measured step is needed");
  if (options.warmup_steps < 0) throw core::InputError("--warmup: expected zero or more steps");
  const torch::Device device = resolve_device(options.device);
  const auto progress = [&](const std::string& what) {
    if (options.on_progress) options.on_progress(what);
  };

  core::Report report;
  report.plan_path = plan_path;
  report.model = plan.model;
  report.device = options.device;
  report.device_name = device.is_cuda() ? "cuda" : profiler::cpu_device_info().name;
  report.global_batch = plan.global_batch;
  report.micro_batches = plan.micro_batches;
  report.checkpointed_blocks = plan.checkpointed_blocks;
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

  if (options.data != "synthetic" && options.data != "fashion-mnist") {
    throw core::InputError("--data: expected synthetic or fashion-mnist, got '" + options.data + "'");
  }
  // A dataset sits in host memory before the run, outside the device budget.
  std::optional<models::LabelledImages> train, test;
  if (options.data == "fashion-mnist") {
    progress("loading Fashion-MNIST");
    train = models::load_fashion_mnist("train");
    test = models::load_fashion_mnist("test");
  }

  // The budget and the recording start before the model exists, so parameters count too.
  const bool enforce = options.enforce_budget && device.is_cpu();
  report.budget_bytes = enforce ? plan.budget_bytes : 0;
  auto recorder = std::make_shared<profiler::MemoryRecorder>(device.type());
  profiler::ScopedMemoryRecording recording(recorder);
  std::optional<ScopedBudget> budget;
  BudgetAllocator::clear_last_refusal();
  if (enforce) budget.emplace(plan.budget_bytes);

  Position position;
  position.phase = "model";
  try {
    models::Model model = models::build_zoo_model(trace.model.name, trace.model.config, options.seed);
    if (model.layers().size() != trace.layers.size()) {
      throw core::InputError("the zoo's " + trace.model.name + " has " + std::to_string(model.layers().size()) +
                             " layers but the trace has " + std::to_string(trace.layers.size()));
    }
    for (std::size_t i = 0; i < trace.layers.size(); ++i) {
      if (model.layers()[i].name != trace.layers[i].name) {
        throw core::InputError("the zoo's " + trace.model.name + " differs from the trace at layer " + std::to_string(i) +
                               " (" + model.layers()[i].name + " vs " + trace.layers[i].name + ")");
      }
    }
    if (!plan.layers.empty() && plan.layers.size() != trace.layers.size()) {
      throw core::InputError("the plan chooses for " + std::to_string(plan.layers.size()) + " layers but the trace has " +
                             std::to_string(trace.layers.size()));
    }
    for (const auto& choice : plan.layers) {
      if (!choice.tempo) continue;
      if (!model.layers()[static_cast<std::size_t>(choice.id)].has_lean_variant()) {
        throw core::InputError("the plan makes layer " + choice.name + " lean, but it has no memory-lean variant");
      }
      model.set_lean(choice.id, true);
    }
    if (train) models::use_dataset(model, *train);
    model.to(device);
    model.set_training(true);
    model.set_batchnorm_eval(options.batchnorm_eval);
    const auto parameters = model.parameters();
    auto optimizer = profiler::make_optimizer(plan.optimizer.empty() ? trace.optimizer.name : plan.optimizer, parameters);
    PlanRunner runner(model, plan.checkpointed_blocks, position);

    // Gradient check, from the initial weights: the plan's accumulated gradient against the full
    // batch's, same data, dropout off on both sides so they compute the same function.
    if (options.gradient_check) {
      const std::int64_t need = full_batch_estimate(trace, plan.global_batch);
      const std::int64_t host = profiler::cpu_device_info().total_memory_bytes;
      if (device.is_cpu() && need > host / 2) {
        report.gradient_check.note = "not computed: the full batch would need about " + core::format_bytes(need) +
                                     ", more than half of this machine's memory";
      } else {
        progress("gradient check");
        if (budget) budget->suspend();  // the reference runs without a budget
        model.set_dropout(false);
        {
          // Its batches, gradient copies and comparison are gone before the budget comes back.
          const auto micro = make_micro_batches(model, plan.micro_batches, options.seed, device);
          for (auto& p : parameters) p.mutable_grad() = torch::Tensor();
          runner.accumulate(micro, plan.global_batch);
          const auto accumulated = gradients_of(parameters);
          for (auto& p : parameters) p.mutable_grad() = torch::Tensor();
          {
            // The reference runs the standard layers: Tempo's must give the same gradients.
            std::vector<bool> lean;
            for (const auto& layer : model.layers()) lean.push_back(layer.lean);
            model.set_all_lean(false);
            torch::Tensor loss = model.forward(concatenate(micro));
            loss.backward();
            for (std::size_t i = 0; i < lean.size(); ++i) {
              if (lean[i]) model.set_lean(static_cast<int>(i), true);
            }
          }
          const auto full = gradients_of(parameters);
          for (auto& p : parameters) p.mutable_grad() = torch::Tensor();
          report.gradient_check.max_rel_diff = max_relative_difference(accumulated, full);
        }
        model.set_dropout(true);
        if (budget) budget->resume();
        report.gradient_check.computed = true;
        bool batchnorm = false;
        for (const auto& layer : trace.layers) batchnorm |= layer.kind == "batchnorm";
        report.gradient_check.note =
            batchnorm && plan.micro_batches.size() > 1 && !options.batchnorm_eval
                ? "BatchNorm normalizes each micro-batch with its own statistics, so the accumulated gradient differs "
                  "from the full batch's by design; dropout off on both sides"
                : std::string("accumulated micro-batch gradients (loss weights b_i/B, checkpointing and Tempo as "
                              "planned) against the full batch's with standard layers, same weights and data, dropout "
                              "off on both sides") +
                      (batchnorm ? ", BatchNorm with running statistics" : "");
      }
    }

    const int total = options.warmup_steps + options.steps;
    for (int step = 0; step < total; ++step) {
      const bool measured = step >= options.warmup_steps;
      progress((measured ? "step " + std::to_string(step - options.warmup_steps + 1) + "/" + std::to_string(options.steps)
                         : "warm-up " + std::to_string(step + 1) + "/" + std::to_string(options.warmup_steps)));
      recorder->reset_peak();
      synchronize(device);
      const auto start = Clock::now();
      optimizer->zero_grad();
      // Each micro-batch's data is made when its turn comes, as a loader would deliver it.
      for (std::size_t m = 0; m < plan.micro_batches.size(); ++m) {
        runner.set_phase("data", static_cast<int>(m));
        const auto batch = make_micro_batches(model, {plan.micro_batches[m]},
                                              options.seed + 7919 * static_cast<std::uint64_t>(step + 1) + m, device);
        runner.run_micro_batch(batch.front(), static_cast<int>(m), plan.global_batch);
      }
      runner.set_phase("optimizer");
      optimizer->step();
      runner.set_phase("idle");
      synchronize(device);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (measured) {
        report.step_seconds.push_back(seconds);
        report.measured.peak_bytes = std::max(report.measured.peak_bytes, recorder->peak());
        report.measured_reserved_bytes = std::max(report.measured_reserved_bytes, recorder->reserved());
      }
    }
    if (test) {
      progress("test accuracy");
      if (budget) budget->suspend();  // evaluation is not part of the planned step
      report.test_accuracy = models::accuracy(model, *test);
      report.data = "fashion-mnist";
    }
    report.status = "ok";
  } catch (const c10::OutOfMemoryError&) {
    const Refusal& refusal = BudgetAllocator::last_refusal();
    core::OutOfMemory oom;
    oom.layer = position.layer;
    oom.phase = position.phase;
    oom.micro_batch = position.micro_batch;
    const std::int64_t baseline = budget ? budget->baseline() : 0;
    oom.requested_bytes = refusal.requested_bytes;
    oom.in_use_bytes = refusal.in_use_bytes - baseline;
    oom.budget_bytes = refusal.budget_bytes - baseline;
    if (refusal.requested_bytes == 0) {
      // Not the budget's refusal (none was recorded on this thread): the device itself ran out.
      oom.phase += " (the device ran out; no budget refusal was recorded)";
      oom.requested_bytes = oom.in_use_bytes = oom.budget_bytes = 0;
    }
    report.out_of_memory = oom;
    report.status = "out_of_memory";
  }

  report.steps = static_cast<int>(report.step_seconds.size());
  if (!report.step_seconds.empty()) {
    std::vector<double> sorted = report.step_seconds;
    std::sort(sorted.begin(), sorted.end());
    report.measured.step_seconds = sorted[sorted.size() / 2];
    report.measured.samples_per_second = static_cast<double>(plan.global_batch) / report.measured.step_seconds;
    report.peak_rel_error = relative_error(static_cast<double>(report.predicted.peak_bytes),
                                           static_cast<double>(report.measured.peak_bytes));
    report.throughput_rel_error = relative_error(report.predicted.samples_per_second, report.measured.samples_per_second);
  }
  return report;
}

}  // namespace headroom::executor
