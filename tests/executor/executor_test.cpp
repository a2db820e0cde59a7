#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>

#include "core/errors.h"
#include "core/host_memory.h"
#include "executor/executor.h"
#include "executor/l2l_execute.h"
#include "executor/plan_runner.h"
#include "executor/step_wrappers.h"
#include "executor/whole_step_runners.h"
#include "models/zoo.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "profiler/profiler.h"
#include "runtime/budget_allocator.h"
#include "runtime/host_info.h"
#include "runtime/optimizer.h"
#include "support/tempo_budget.h"

namespace headroom {
namespace {

const std::map<std::string, std::string> kMlp = {{"input", "16"}, {"hidden", "32"}, {"depth", "3"}};
const std::map<std::string, std::string> kBertTiny = {
    {"preset", "tiny"}, {"hidden", "32"}, {"heads", "2"}, {"seq", "16"}, {"vocab", "64"}};

// Accumulated gradients of `micro` sizes (with `checkpointed` blocks) against one full batch,
// from the same weights and data, dropout off.
double gradient_difference(const std::string& name, const std::map<std::string, std::string>& config,
                           const std::vector<std::int64_t>& micro, const std::vector<int>& checkpointed) {
  models::Model model = models::build_zoo_model(name, config, 3);
  model.set_training(true);
  model.set_dropout(false);
  executor::Position position;
  executor::PlanRunner runner(model, checkpointed, position);
  const auto batches = executor::make_micro_batches(model, micro, 5, torch::kCPU);
  std::int64_t total = 0;
  for (const auto b : micro) total += b;
  runner.accumulate(batches, total);
  const auto accumulated = executor::gradients_of(model.parameters());
  for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  model.forward(executor::concatenate(batches)).backward();
  return executor::max_relative_difference(accumulated, executor::gradients_of(model.parameters()));
}

// A plan goes to the first whole-step runner that takes it (an L2L plan to L2L, any other to
// the micro-batch step) and is wrapped by each step wrapper it uses (on one worker none: nothing
// joins a process group).
TEST(Executor, APlanRunsOnTheRunnerAndWrappersItChose) {
  core::Plan plan;
  plan.choice.micro_batches = {4, 4};
  EXPECT_EQ(executor::whole_step_runner(plan), nullptr);
  core::Report report;
  EXPECT_TRUE(executor::make_step_wrappers(plan, executor::ExecuteOptions{}, torch::kCPU, report).empty());
  EXPECT_FALSE(report.data_parallel);
  plan.choice.l2l = core::L2LChoice{};
  const executor::WholeStepRunner* l2l = executor::whole_step_runner(plan);
  ASSERT_NE(l2l, nullptr);
  EXPECT_EQ(l2l->run, &executor::execute_l2l);
}

TEST(Executor, MicroBatchedGradientsEqualTheFullBatch) {
  // Uneven split on purpose: weights b_i / B, not 1 / n.
  EXPECT_LT(gradient_difference("mlp", kMlp, {5, 5, 3}, {}), 1e-5);
  EXPECT_LT(gradient_difference("bert", kBertTiny, {4, 3, 3, 2}, {}), 1e-5);
}

TEST(Executor, CheckpointedGradientsEqualTheFullBatch) {
  EXPECT_LT(gradient_difference("mlp", kMlp, {6, 6}, {0, 2}), 1e-5);
  EXPECT_LT(gradient_difference("bert", kBertTiny, {12}, {0, 1}), 1e-5);
  EXPECT_LT(gradient_difference("bert", kBertTiny, {5, 4, 3}, {1}), 1e-5);
}

TEST(Executor, UnevenSplitWithOneOverNWeightsWouldBeWrong) {
  // The test above could not fail if the weighting did not matter: with weights 1/n the same
  // uneven split gives a visibly different gradient.
  models::Model model = models::build_zoo_model("mlp", kMlp, 3);
  model.set_dropout(false);
  const auto batches = executor::make_micro_batches(model, {6, 2}, 5, torch::kCPU);
  for (const auto& b : batches) (model.forward(b) * 0.5).backward();
  const auto one_over_n = executor::gradients_of(model.parameters());
  for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  model.forward(executor::concatenate(batches)).backward();
  EXPECT_GT(executor::max_relative_difference(one_over_n, executor::gradients_of(model.parameters())), 1e-3);
}

// fp16-autocast's loss scaling, in the step the executor runs (the arithmetic is the same in any
// precision, so it is checked on the CPU in float32; fp16 autocast itself runs on CUDA only): each
// micro-batch's backward starts from its weighted loss times the scale, and the optimizer unscales
// the accumulated gradients once. The scale is a power of two, so the scaled step and the unscaled
// one end with the same weights to the bit. A step whose gradients hold an inf is skipped (the
// weights and Adam's state untouched) and the scale halves; the next clean step goes ahead.
TEST(Executor, LossScaledMicroBatchesStepAsUnscaledOnesAndSkipStepsWithInfs) {
  // `omitted`: a step whose optimizer step an unscaled run leaves out, as a skip would.
  const auto train = [](bool scaling, bool inject_inf, int omitted = -1) {
    models::Model model = models::build_zoo_model("mlp", kMlp, 3);
    model.set_training(true);
    model.set_dropout(false);
    const auto parameters = model.parameters();
    auto optimizer = runtime::make_optimizer("adam", parameters,
                                             scaling ? std::optional<runtime::LossScaleOptions>(runtime::LossScaleOptions{})
                                                     : std::nullopt);
    executor::Position position;
    executor::PlanRunner runner(model, {1}, position);
    runner.set_loss_scaler(runtime::loss_scaler_of(*optimizer));
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
      runtime::zero_gradients_kept(*optimizer);
      losses.push_back(runner.accumulate(executor::make_micro_batches(model, {3, 3, 2}, 5 + step, torch::kCPU), 8));
      if (inject_inf && step == 1) {
        torch::NoGradGuard no_grad;
        parameters.front().mutable_grad().view(-1)[0] = std::numeric_limits<float>::infinity();
      }
      if (step != omitted) optimizer->step();
    }
    std::vector<torch::Tensor> weights;
    for (const auto& p : parameters) weights.push_back(p.detach().clone());
    const runtime::LossScaler* scaler = runtime::loss_scaler_of(*optimizer);
    return std::tuple{weights, losses, scaler != nullptr ? scaler->current_scale() : 0.0,
                      scaler != nullptr ? scaler->skipped_steps() : 0, runtime::optimizer_state_bytes(*optimizer)};
  };
  const auto [plain, plain_losses, no_scale, no_skips, plain_state] = train(false, false);
  const auto [scaled, scaled_losses, scale, skips, scaled_state] = train(true, false);
  EXPECT_EQ(executor::max_relative_difference(scaled, plain), 0.0);
  EXPECT_EQ(scaled_losses, plain_losses);  // the losses reported are the unscaled ones
  EXPECT_EQ(scale, 65536.0);               // no step overflowed; growth comes after 2000 clean ones
  EXPECT_EQ(skips, 0);
  EXPECT_EQ(scaled_state, plain_state + 12);  // the scale, its growth tracker and the inf flag

  const auto [skipped, skipped_losses, backed_off, one_skip, state] = train(true, true);
  EXPECT_EQ(one_skip, 1);
  EXPECT_EQ(backed_off, 32768.0);
  // The weights are those of an unscaled run that left the second step out, to the bit.
  const auto [left_out, left_out_losses, unused_scale, unused_skips, unused_state] = train(false, false, 1);
  EXPECT_EQ(executor::max_relative_difference(skipped, left_out), 0.0);
  EXPECT_GT(executor::max_relative_difference(skipped, plain), 0.0);
  EXPECT_EQ(skipped_losses, left_out_losses);
}

TEST(Executor, CheckpointedDropoutReproducesTheSameGradients) {
  // Dropout on: a checkpointed block must draw the same masks when it is recomputed.
  const auto run = [](const std::vector<int>& checkpointed) {
    models::Model model = models::build_zoo_model("bert", kBertTiny, 3);
    model.set_training(true);
    executor::Position position;
    executor::PlanRunner runner(model, checkpointed, position);
    const auto batches = executor::make_micro_batches(model, {6}, 5, torch::kCPU);
    torch::manual_seed(11);
    runner.accumulate(batches, 6);
    return executor::gradients_of(model.parameters());
  };
  const auto stored = run({});
  EXPECT_LT(executor::max_relative_difference(run({0, 1}), stored), 1e-5);
  // Dropout really is on: another seed gives other gradients.
  models::Model model = models::build_zoo_model("bert", kBertTiny, 3);
  executor::Position position;
  executor::PlanRunner runner(model, {}, position);
  torch::manual_seed(12);
  runner.accumulate(executor::make_micro_batches(model, {6}, 5, torch::kCPU), 6);
  EXPECT_GT(executor::max_relative_difference(executor::gradients_of(model.parameters()), stored), 1e-4);
}

TEST(Executor, CheckpointingCountsEachBatchOnceInBatchNormStatistics) {
  const auto running_means = [](const std::vector<int>& checkpointed) {
    auto model = models::build_zoo_model("cnn", {{"image", "12"}, {"width", "4"}, {"stages", "2"}}, 3);
    model.set_training(true);
    executor::Position position;
    executor::PlanRunner runner(model, checkpointed, position);
    runner.accumulate(executor::make_micro_batches(model, {4, 4}, 5, torch::kCPU), 8);
    std::vector<torch::Tensor> buffers;
    for (const auto& b : model.buffers()) buffers.push_back(b.detach().to(torch::kFloat64));
    return buffers;
  };
  const auto stored = running_means({});
  const auto checkpointed = running_means({0, 1});
  ASSERT_EQ(stored.size(), checkpointed.size());
  ASSERT_FALSE(stored.empty());
  EXPECT_LT(executor::max_relative_difference(checkpointed, stored), 1e-6);
}

// A hand-made plan for the zoo model of a profiled trace.
core::Plan plan_for(const core::Trace& trace, std::int64_t budget, std::vector<std::int64_t> micro,
                    std::vector<int> checkpointed = {}) {
  core::Plan plan;
  plan.trace_path = "test";
  plan.trace_sha256 = std::string(64, '0');
  plan.model = trace.model.name;
  plan.device = "cpu";
  plan.budget_bytes = budget;
  for (const auto b : micro) plan.global_batch += b;
  plan.choice.micro_batches = std::move(micro);
  plan.choice.checkpointed_blocks = std::move(checkpointed);
  plan.predicted = {1, 1, 1};
  return plan;
}

core::Trace small_bert_trace() {
  auto model = models::build_zoo_model("bert", kBertTiny, 0);
  profiler::ProfileOptions options;
  options.batch_sizes = {1, 2, 4};
  options.repeats = 1;
  return profiler::profile(model, options);
}

TEST(Executor, TheWholeBatchIsRefusedWhereThePlanRuns) {
  const core::Trace trace = small_bert_trace();
  executor::ExecuteOptions options;
  options.steps = 1;
  options.warmup_steps = 1;
  options.gradient_check = false;
  // Measure what 4 micro-batches of 8 need without a budget, then give a bit more than that.
  const auto free_run = executor::execute(plan_for(trace, 1LL << 40, {8, 8, 8, 8}), trace, "t", options);
  ASSERT_EQ(free_run.status, "ok");
  const std::int64_t budget = free_run.measured.peak_bytes * 21 / 20;

  const auto whole = executor::execute(plan_for(trace, budget, {32}), trace, "t", options);
  ASSERT_EQ(whole.status, "out_of_memory");
  ASSERT_TRUE(whole.out_of_memory);
  EXPECT_GT(whole.out_of_memory->requested_bytes, 0);
  EXPECT_GT(whole.out_of_memory->in_use_bytes + whole.out_of_memory->requested_bytes, budget);
  EXPECT_FALSE(whole.out_of_memory->layer.empty());  // it says where
  EXPECT_EQ(whole.steps, 0);

  const auto planned = executor::execute(plan_for(trace, budget, {8, 8, 8, 8}, {0}), trace, "t", options);
  ASSERT_EQ(planned.status, "ok");
  EXPECT_LE(planned.measured.peak_bytes, budget);
  EXPECT_EQ(runtime::BudgetAllocator::instance().limit(), 0);  // lifted after the run
}

// A report names the host-memory regime it ran in and what the host held next to the
// peak; a trace measured in another regime gets a warning.
TEST(Executor, ReportsTheRegimeAndWhatTheHostHeld) {
  const core::Trace trace = small_bert_trace();
  executor::ExecuteOptions options;
  options.steps = 1;
  options.gradient_check = false;
  const auto report = executor::execute(plan_for(trace, 1LL << 40, {4, 4}), trace, "t", options);
  ASSERT_EQ(report.status, "ok");
  EXPECT_EQ(report.host_memory_regime, core::regime_of_process());
  for (const auto& w : report.warnings) EXPECT_EQ(w.find("host-memory regime"), std::string::npos) << w;
  ASSERT_TRUE(report.host_memory.has_value());
  const auto& h = *report.host_memory;
  EXPECT_GT(h.resident_start_bytes, 0);
  EXPECT_GT(h.heap_peak_bytes, 0);
  // The heap is part of what is resident, sampled at the same moments among others.
  EXPECT_GE(h.resident_peak_bytes, h.heap_peak_bytes);
  EXPECT_LE(h.heap_free_bytes, h.heap_peak_bytes);
  EXPECT_EQ(h.trims, 0);  // only a host limit hands heap back

  core::Trace other = trace;
  other.host_memory_regime = "libjemalloc.so.2 malloc";
  const auto warned = executor::execute(plan_for(other, 1LL << 40, {4, 4}), other, "t", options);
  ASSERT_EQ(warned.status, "ok");
  const bool named = std::any_of(warned.warnings.begin(), warned.warnings.end(), [](const std::string& w) {
    return w.find("another host-memory regime (libjemalloc.so.2 malloc)") != std::string::npos;
  });
  EXPECT_TRUE(named) << ::testing::PrintToString(warned.warnings);
}

// The step runs at the threads it was profiled with, never more than this process may use, and the
// report says how many, with the machine timed before and after the run.
TEST(Executor, RunsAtTheProfiledThreadsAndTimesTheMachineAroundTheRun) {
  const core::Trace trace = small_bert_trace();
  executor::ExecuteOptions options;
  options.steps = 2;
  options.gradient_check = false;
  core::Plan plan = plan_for(trace, 1LL << 40, {4, 4});
  plan.threads = 1;
  const auto report = executor::execute(plan, trace, "t", options);
  ASSERT_EQ(report.status, "ok");
  EXPECT_EQ(report.threads, 1);
  EXPECT_EQ(at::get_num_threads(), 1);
  ASSERT_TRUE(report.calibration_before && report.calibration_after);
  EXPECT_GT(report.calibration_before->matmul(), 0);
  EXPECT_GT(report.calibration_after->memory(), 0);
  EXPECT_EQ(report.step_seconds.size(), 2u);

  plan.threads = runtime::usable_cores() + 1;
  try {
    executor::execute(plan, trace, "t", options);
    ADD_FAILURE() << "more threads than cores ran";
  } catch (const core::InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("threads: the step was profiled at " + std::to_string(plan.threads), 0), 0u) << e.what();
  }
  options.threads = -1;
  EXPECT_THROW(executor::execute(plan, trace, "t", options), core::InputError);
}

TEST(Executor, ReportsTheGradientCheck) {
  const core::Trace trace = small_bert_trace();
  executor::ExecuteOptions options;
  options.steps = 1;
  const auto report = executor::execute(plan_for(trace, 1LL << 40, {3, 3, 2}, {1}), trace, "t", options);
  ASSERT_EQ(report.status, "ok");
  ASSERT_TRUE(report.gradient_check.computed);
  EXPECT_LT(report.gradient_check.max_rel_diff, 1e-5);
  EXPECT_GT(report.measured.peak_bytes, 0);
  EXPECT_GT(report.measured.samples_per_second, 0);
}

// Tempo end to end on a small bert profiled with its Tempo pass: under a budget between what the
// all-Tempo and the standard step need, the standard step is refused, the planner's Tempo plan runs
// within the budget, its peak is predicted to 5%, and its gradients are the standard layers'.
TEST(Executor, TempoPlanRunsWhereTheStandardStepIsRefused) {
  const core::Trace trace = small_bert_trace();
  ASSERT_TRUE(trace.has_tempo());
  const std::int64_t batch = 16;
  const auto [standard, tempo, request] = testing::tempo_budget(trace, batch);
  ASSERT_LT(tempo, standard);
  const auto outcome = planner::plan_step(trace, request);
  ASSERT_TRUE(outcome.plan) << outcome.reason;
  const int tempo_layers = outcome.plan->choice.tempo_count();
  EXPECT_GT(tempo_layers, 0);

  executor::ExecuteOptions options;
  options.steps = 2;
  const auto report = executor::execute(*outcome.plan, trace, "t", options);
  ASSERT_EQ(report.status, "ok");
  EXPECT_LE(report.measured.peak_bytes, request.budget_bytes);
  EXPECT_LT(std::abs(report.peak_rel_error), 0.05) << "predicted " << report.predicted.peak_bytes << ", measured "
                                          << report.measured.peak_bytes;
  ASSERT_TRUE(report.gradient_check.computed);
  // LayerNorm and attention are exact to fp32 rounding; a Tempo GELU is off by up to 2.5e-4 in its
  // derivative near the minimum (fp32's rounding of the saved output), which shows in gradients.
  bool tempo_gelu = false;
  for (const auto& layer : outcome.plan->choice.layers) {
    tempo_gelu |= layer.variant == core::LayerVariant::Tempo && trace.layers[static_cast<std::size_t>(layer.id)].kind == "gelu";
  }
  EXPECT_LT(report.gradient_check.max_rel_diff, tempo_gelu ? 1e-4 : 1e-5);

  options.gradient_check = false;
  const auto refused = executor::execute(plan_for(trace, request.budget_bytes, {batch}), trace, "t", options);
  EXPECT_EQ(refused.status, "out_of_memory");
}

TEST(Executor, RejectsBadRequests) {
  const core::Trace trace = small_bert_trace();
  executor::ExecuteOptions options;
  if (!torch::cuda::is_available()) {  // a CPU-only libtorch, or no GPU: cuda is refused by name
    options.device = "cuda";
    EXPECT_THROW(executor::execute(plan_for(trace, 1LL << 40, {4}), trace, "t", options), core::InputError);
  }
  options.device = "cpu";
  options.steps = 0;
  EXPECT_THROW(executor::execute(plan_for(trace, 1LL << 40, {4}), trace, "t", options), core::InputError);
  options.steps = 1;
  EXPECT_THROW(executor::execute(plan_for(trace, 1LL << 40, {4}, {7}), trace, "t", options), core::InputError);
  core::Trace renamed = trace;
  renamed.layers[3].name = "something.else";
  EXPECT_THROW(executor::execute(plan_for(renamed, 1LL << 40, {4}), renamed, "t", options), core::InputError);
}

// A frozen backbone (every layer but fc): no gradient or optimizer state for it, and nothing kept
// for backward below fc. The profile measures that, the plan counts it, and the executor, which
// freezes the same parameters from the trace, holds what was predicted.
TEST(Executor, AFrozenBackboneIsPredictedAsItRuns) {
  const std::map<std::string, std::string> cnn = {{"image", "16"}, {"width", "8"}, {"stages", "2"}};
  models::Model model = models::build_zoo_model("cnn", cnn, 0);
  model.freeze({"*", "!fc"});
  std::int64_t fc_bytes = 0;
  for (const auto& p : model.trainable_parameters()) fc_bytes += p.numel() * static_cast<std::int64_t>(p.element_size());
  profiler::ProfileOptions profile;
  profile.batch_sizes = {1, 2, 4};
  profile.repeats = 1;
  profile.timing_seconds = 0;
  const core::Trace trace = profiler::profile(model, profile);
  EXPECT_EQ(trace.model.freeze, (std::vector<std::string>{"*", "!fc"}));
  EXPECT_EQ(trace.trainable_param_bytes(), fc_bytes);
  EXPECT_EQ(trace.optimizer.state_bytes, 2 * fc_bytes);  // Adam's two moments, for fc alone
  for (const auto& layer : trace.layers) {
    if (layer.name == "fc" || layer.name == "loss") continue;
    // Nothing below fc needs a gradient, so autograd keeps nothing there (the pool's output is fc's input,
    // which fc keeps: it counts at its producer).
    if (layer.name != "pool") {
      EXPECT_EQ(layer.samples.back().kept_bytes, 0) << layer.name;
    }
    EXPECT_EQ(layer.frozen_param_bytes, layer.param_bytes) << layer.name;
  }
  for (const auto& step : trace.steps) {
    EXPECT_EQ(step.static_bytes, trace.param_bytes() + fc_bytes + 2 * fc_bytes + trace.model_extra_bytes);
  }

  planner::PlanRequest request;
  request.budget_bytes = std::int64_t{1} << 40;
  request.global_batch = 8;
  request.trace_path = "t";
  request.trace_sha256 = std::string(64, '0');
  const planner::PlanOutcome outcome = planner::plan_step(trace, request);
  ASSERT_TRUE(outcome.plan);
  executor::ExecuteOptions options;
  options.steps = 2;
  options.warmup_steps = 1;
  const auto run = executor::execute(*outcome.plan, trace, "t", options);
  ASSERT_EQ(run.status, "ok");
  EXPECT_LE(run.measured.peak_bytes, outcome.plan->predicted.peak_bytes);
  EXPECT_GE(static_cast<double>(run.measured.peak_bytes), 0.99 * static_cast<double>(outcome.plan->predicted.peak_bytes));
}

}  // namespace
}  // namespace headroom
