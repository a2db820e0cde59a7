#include <gtest/gtest.h>

#include <cstdio>
#include <optional>

#include "core/cost_model.h"
#include "core/errors.h"
#include "executor/executor.h"
#include "executor/l2l_runner.h"
#include "executor/plan_runner.h"
#include "models/zoo.h"
#include "planner/l2l_model.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "profiler/profiler.h"
#include "runtime/budget_allocator.h"
#include "runtime/optimizer.h"

namespace headroom {
namespace {

const std::map<std::string, std::string> kBertTiny = {
    {"preset", "tiny"}, {"hidden", "32"}, {"heads", "2"}, {"seq", "16"}, {"vocab", "64"}};

std::vector<models::Batch> step_batches(const models::Model& model, const std::vector<std::int64_t>& sizes, int step) {
  return executor::make_micro_batches(model, sizes, 11 + static_cast<std::uint64_t>(step), torch::kCPU);
}

std::int64_t total(const std::vector<std::int64_t>& sizes) {
  std::int64_t b = 0;
  for (const auto s : sizes) b += s;
  return b;
}

// Ordinary training: every micro-batch through the whole model, gradients accumulating, one
// optimizer step over all parameters. Dropout off, so both orders compute the same function.
std::vector<torch::Tensor> ordinary_weights(const std::string& optimizer, const std::vector<std::int64_t>& sizes,
                                            int steps) {
  models::Model model = models::build_zoo_model("bert", kBertTiny, 3);
  model.set_training(true);
  model.set_dropout(false);
  auto opt = runtime::make_optimizer(optimizer, model.parameters());
  executor::Position position;
  executor::PlanRunner runner(model, {}, position);
  for (int step = 0; step < steps; ++step) {
    opt->zero_grad();
    runner.accumulate(step_batches(model, sizes, step), total(sizes));
    opt->step();
  }
  std::vector<torch::Tensor> weights;
  for (const auto& p : model.parameters()) weights.push_back(p.detach().clone());
  return weights;
}

std::vector<torch::Tensor> l2l_weights(const std::string& optimizer, const std::vector<std::int64_t>& sizes, int steps,
                                         executor::L2LOptions options) {
  models::Model model = models::build_zoo_model("bert", kBertTiny, 3);
  model.set_training(true);
  model.set_dropout(false);
  options.optimizer = optimizer;
  executor::Position position;
  executor::L2LRunner l2l(model, options, position);
  EXPECT_EQ(l2l.stage_count(), 4);  // embeddings, two encoder blocks, pooler-head-loss
  for (int step = 0; step < steps; ++step) l2l.step(step_batches(model, sizes, step), total(sizes));
  std::vector<torch::Tensor> weights;
  for (const auto& p : l2l.host_parameters()) weights.push_back(p.detach().clone());
  return weights;
}

TEST(L2L, WeightsAfterThreeAdamStepsEqualOrdinaryTraining) {
  const std::vector<std::int64_t> sizes = {3, 2, 3};  // uneven: the b_i / B weights matter
  const auto reference = ordinary_weights("adam", sizes, 3);
  const auto initial = l2l_weights("adam", sizes, 0, {});
  // The steps moved the weights: equality below is not that of untouched ones.
  EXPECT_GT(executor::max_relative_difference(initial, reference), 1e-3);
  for (const bool on_host : {false, true}) {
    for (const bool overlap : {false, true}) {
      executor::L2LOptions options;
      options.boundaries_on_host = on_host;
      options.prefetch = overlap;
      options.overlap_optimizer = overlap;
      const auto trained = l2l_weights("adam", sizes, 3, options);
      const double diff = executor::max_relative_difference(trained, reference);
      std::printf("boundaries on host %d, overlap %d: max relative difference %.3g\n", on_host, overlap, diff);
      EXPECT_LE(diff, 1e-5)
          << "boundaries on host " << on_host << ", overlap " << overlap;
    }
  }
}

// From a chosen block on: the stages before it stay on the device and step there; the weights are
// still ordinary training's, whichever block L2L starts at.
TEST(L2L, FromAChosenBlockOnTrainsAsOrdinaryTraining) {
  const std::vector<std::int64_t> sizes = {3, 2, 3};
  const auto reference = ordinary_weights("adam", sizes, 3);
  const models::Model model = models::build_zoo_model("bert", kBertTiny, 3);
  // Every block a plan can start L2L at (the layers after the last block are no block).
  std::vector<int> blocks;
  for (std::size_t i = 1; i < model.layers().size(); ++i) {
    const int block = model.layers()[i].block;
    if (block != model.layers()[i - 1].block && block >= 0) blocks.push_back(block);
  }
  ASSERT_EQ(blocks.size(), 2u);
  for (const int first : blocks) {
    for (const bool on_host : {false, true}) {
      executor::L2LOptions options;
      options.from_block = first;
      options.boundaries_on_host = on_host;
      const double diff = executor::max_relative_difference(l2l_weights("adam", sizes, 3, options), reference);
      std::printf("offloaded from block %d, boundaries on host %d: max relative difference %.3g\n", first, on_host, diff);
      EXPECT_LE(diff, 1e-5) << "from block " << first;
    }
  }
  // A block the model does not have is no place to start L2L.
  models::Model other = models::build_zoo_model("bert", kBertTiny, 3);
  executor::L2LOptions nowhere;
  nowhere.from_block = 1000;
  executor::Position position;
  EXPECT_THROW(executor::L2LRunner(other, nowhere, position), core::InputError);
}

// accumulate() leaves its gradients for a step to add to, in the stages kept on the device as in
// the offloaded ones: the step is ordinary training's over both batches' gradients.
TEST(L2L, AStepAfterAccumulateAddsToItsGradientsInEveryStage) {
  const std::vector<std::int64_t> sizes = {3, 3};
  models::Model ordinary = models::build_zoo_model("bert", kBertTiny, 3);
  ordinary.set_training(true);
  ordinary.set_dropout(false);
  auto sgd = runtime::make_optimizer("sgd", ordinary.parameters());
  executor::Position position;
  {
    executor::PlanRunner runner(ordinary, {}, position);
    runner.accumulate(step_batches(ordinary, sizes, 0), total(sizes));
    runner.accumulate(step_batches(ordinary, sizes, 1), total(sizes));
    sgd->step();
  }
  models::Model model = models::build_zoo_model("bert", kBertTiny, 3);
  model.set_training(true);
  model.set_dropout(false);
  executor::L2LOptions options;
  options.optimizer = "sgd";
  // Stages kept on the device and offloaded ones both: L2L starts at the second encoder block.
  int blocks_seen = 0;
  for (std::size_t i = 1; i < model.layers().size() && options.from_block == core::L2LChoice::kWholeModel; ++i) {
    if (model.layers()[i].block != model.layers()[i - 1].block && ++blocks_seen == 2) {
      options.from_block = model.layers()[i].block;
    }
  }
  executor::L2LRunner l2l(model, options, position);
  ASSERT_EQ(l2l.kept_stage_count(), 2);
  l2l.accumulate(step_batches(model, sizes, 0), total(sizes));
  l2l.step(step_batches(model, sizes, 1), total(sizes));
  std::vector<torch::Tensor> expected, trained;
  for (const auto& p : ordinary.parameters()) expected.push_back(p.detach());
  for (const auto& p : l2l.host_parameters()) trained.push_back(p.detach());
  EXPECT_LE(executor::max_relative_difference(trained, expected), 1e-5);
}

TEST(L2L, WeightsAfterThreeSgdStepsEqualOrdinaryTraining) {
  const std::vector<std::int64_t> sizes = {4, 4};
  EXPECT_LE(executor::max_relative_difference(l2l_weights("sgd", sizes, 3, {}), ordinary_weights("sgd", sizes, 3)), 1e-5);
}

TEST(L2L, GradientsEqualTheFullBatch) {
  models::Model model = models::build_zoo_model("bert", kBertTiny, 3);
  model.set_training(true);
  model.set_dropout(false);
  const std::vector<std::int64_t> sizes = {2, 3, 3};
  const auto batches = step_batches(model, sizes, 0);
  model.forward(executor::concatenate(batches)).backward();
  const auto full = executor::gradients_of(model.parameters());
  executor::Position position;
  executor::L2LRunner l2l(model, {}, position);
  l2l.accumulate(batches, total(sizes));
  EXPECT_LE(executor::max_relative_difference(l2l.host_gradients(), full), 1e-5);
}

// A stage crosses the link as one buffer of one type; a stage mixing types is refused by name
// rather than copied wrongly.
TEST(L2L, StageMixingParameterTypesIsRefused) {
  models::Model model = models::build_zoo_model("bert", kBertTiny, 3);
  torch::NoGradGuard no_grad;
  model.layers()[1].parameters.front().set_data(model.layers()[1].parameters.front().to(torch::kDouble));
  executor::Position position;
  try {
    executor::L2LRunner l2l(model, {}, position);
    FAIL() << "a stage mixing float and double was offloaded";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("mix parameter types (Float, Double)"), std::string::npos) << e.what();
  }
}

// Dropout on: the backward's recompute must draw the forward's masks. Two L2L runs from the same
// weights and RNG state give the same gradients, and they differ from a run whose masks differ.
TEST(L2L, RecomputeDrawsTheForwardsDropoutMasks) {
  auto gradients = [](std::uint64_t rng_seed) {
    models::Model model = models::build_zoo_model("bert", kBertTiny, 3);
    model.set_training(true);
    executor::Position position;
    executor::L2LRunner l2l(model, {}, position);
    const auto batches = step_batches(model, {4, 4}, 0);
    torch::manual_seed(rng_seed);
    l2l.accumulate(batches, 8);
    std::vector<torch::Tensor> g;
    for (const auto& t : l2l.host_gradients()) g.push_back(t.clone());
    return g;
  };
  const auto a = gradients(1), b = gradients(1), c = gradients(2);
  EXPECT_EQ(executor::max_relative_difference(a, b), 0.0);
  EXPECT_GT(executor::max_relative_difference(a, c), 1e-3);
}

// The seed paper's point: a model whose parameters alone exceed the device trains, the device
// holding about two stages' parameters and one stage's activations.
TEST(L2L, ModelWhoseParametersExceedTheBudgetTrains) {
  // Wide and short: parameters, not activations, are what the device cannot hold.
  const std::map<std::string, std::string> config = {{"preset", "tiny"}, {"layers", "8"}, {"hidden", "256"},
                                                     {"heads", "2"},     {"seq", "8"},     {"vocab", "64"}};
  const std::vector<std::int64_t> sizes = {2, 2};
  auto& allocator = runtime::BudgetAllocator::instance();
  std::optional<models::Model> model;
  {
    runtime::HostScope host;  // built on the host, as an eager param server holds it
    model.emplace(models::build_zoo_model("bert", config, 3));
  }
  model->set_training(true);
  model->set_dropout(false);  // so ordinary training below computes the same function
  const std::int64_t parameter_bytes = model->parameter_bytes();
  const std::int64_t budget = parameter_bytes / 2;
  {
    runtime::ScopedBudget scoped(budget);
    EXPECT_THROW(models::build_zoo_model("bert", config, 3), c10::OutOfMemoryError);
  }
  executor::Position position;
  executor::L2LRunner l2l(*model, {}, position);
  {
    runtime::ScopedBudget scoped(budget);
    const std::int64_t baseline = scoped.baseline();
    allocator.reset_peak();
    for (int step = 0; step < 3; ++step) l2l.step(step_batches(*model, sizes, step), total(sizes));
    EXPECT_LE(allocator.peak() - baseline, budget);
    EXPECT_GT(allocator.peak() - baseline, 0);
  }
  // What it trained to is what ordinary training, without a budget, trains to.
  models::Model reference = models::build_zoo_model("bert", config, 3);
  reference.set_training(true);
  reference.set_dropout(false);
  auto optimizer = runtime::make_optimizer("adam", reference.parameters());
  executor::PlanRunner runner(reference, {}, position);
  for (int step = 0; step < 3; ++step) {
    optimizer->zero_grad();
    runner.accumulate(step_batches(reference, sizes, step), total(sizes));
    optimizer->step();
  }
  EXPECT_LE(executor::max_relative_difference(l2l.host_parameters(), reference.parameters()), 1e-5);
}

// The planner's model of L2L against L2L's measured device-side peak, both variants.
TEST(L2L, PredictedDevicePeakBoundsTheMeasuredOne) {
  const std::map<std::string, std::string> config = {{"preset", "tiny"}, {"layers", "4"}, {"hidden", "32"},
                                                     {"heads", "2"},     {"seq", "16"},    {"vocab", "64"}};
  core::Trace trace;
  {
    auto model = models::build_zoo_model("bert", config, 0);
    profiler::ProfileOptions options;
    options.batch_sizes = {1, 2, 4};
    options.repeats = 1;
    options.tempo = false;
    trace = profiler::profile(model, options);
  }
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  auto& allocator = runtime::BudgetAllocator::instance();
  // The whole model offloaded, and from block 1 on (the embeddings and block 0 kept on the device,
  // with their parameters and Adam's state there).
  for (const core::L2LChoice l2l : {core::L2LChoice{false}, core::L2LChoice{true}, core::L2LChoice{false, 1},
                                        core::L2LChoice{true, 1}}) {
    const bool on_host = l2l.boundaries_on_host;
    const std::vector<std::int64_t> sizes = {4, 4, 3};
    const auto predicted = planner::predict_l2l_step(costs, graph, sizes, l2l);
    std::optional<models::Model> model;
    {
      runtime::HostScope host;
      model.emplace(models::build_zoo_model("bert", config, 0));
    }
    model->set_training(true);
    executor::Position position;
    executor::L2LOptions options;
    options.boundaries_on_host = on_host;
    options.settle_prefetch = true;
    options.from_block = l2l.from_block;
    // The device side counts from before L2L placed anything there (the kept stages).
    const std::int64_t base = allocator.in_use();
    executor::L2LRunner runner(*model, options, position);
    EXPECT_EQ(runner.stage_count(), static_cast<int>(planner::l2l_stage_costs(trace).size()));
    EXPECT_EQ(runner.kept_stage_count(), predicted.kept_stages);
    EXPECT_EQ(runner.largest_stage_parameter_bytes(), predicted.largest_stage_parameter_bytes);
    std::int64_t measured = 0;
    for (int step = 0; step < 2; ++step) {
      const auto batches = step_batches(*model, sizes, step);
      allocator.reset_peak();
      runner.step(batches, total(sizes));
      measured = allocator.peak() - base;
    }
    const double error = static_cast<double>(predicted.device_peak_bytes - measured) / static_cast<double>(measured);
    std::printf("boundaries on %s, %d stages kept: predicted %lld, measured %lld (%+.2f%%) at %s\n", on_host ? "host" : "device",
                predicted.kept_stages,
                static_cast<long long>(predicted.device_peak_bytes), static_cast<long long>(measured), 100 * error,
                predicted.peak_at.c_str());
    EXPECT_GE(predicted.device_peak_bytes, measured);
    EXPECT_LE(error, 0.02);
  }
}

// `headroom execute` of an L2L plan: the planner picks L2L where nothing else fits, and the
// executor runs it under the plan's device budget, its peak as predicted, its gradients the full batch's.
TEST(L2L, ExecuteRunsTheL2LPlanUnderItsBudget) {
  const std::map<std::string, std::string> config = {{"preset", "tiny"}, {"layers", "4"}, {"hidden", "128"},
                                                     {"heads", "2"},     {"seq", "16"},   {"vocab", "64"}};
  core::Trace trace;
  {
    auto model = models::build_zoo_model("bert", config, 0);
    profiler::ProfileOptions options;
    options.batch_sizes = {1, 2, 4, 8};  // up to the global batch: every micro-batch size measured
    options.repeats = 1;
    options.tempo = false;
    trace = profiler::profile(model, options);
  }
  // The CPU's copy link, which times L2L's copies: L2L's memcpys, measured by the profiler each
  // way (from a source out of the caches in, from one just written out); a copy's fixed cost
  // (allocation, dispatch) is far below a millisecond.
  EXPECT_GT(trace.device.host_to_device_bytes_per_s, 1e8);
  EXPECT_GT(trace.device.device_to_host_bytes_per_s, 1e8);
  for (const auto latency : {trace.device.host_to_device_latency_ns, trace.device.device_to_host_latency_ns}) {
    EXPECT_GE(latency, 0);
    EXPECT_LT(latency, 1'000'000);
  }
  planner::PlanRequest request;
  request.global_batch = 8;
  request.trace_path = "t.json";
  request.trace_sha256 = std::string(64, '0');
  request.budget_bytes = 1;
  request.strategies = planner::parse_strategies("mbp,checkpoint");
  const std::int64_t ordinary = planner::plan_step(trace, request).smallest_budget;
  request.strategies = planner::parse_strategies("mbp,checkpoint,l2l");
  const std::int64_t with_l2l = planner::plan_step(trace, request).smallest_budget;
  ASSERT_LT(with_l2l, ordinary);
  request.budget_bytes = (with_l2l + ordinary) / 2;
  const auto outcome = planner::plan_step(trace, request);
  ASSERT_TRUE(outcome.plan && outcome.plan->choice.l2l) << outcome.reason;
  // The search may keep the first stages on the device where that is predicted faster (it depends
  // on this run's timings): the plan offloaded from `block` on, its prediction made for that.
  const core::CostModel costs(trace);
  const auto offloaded_from = [&](int block) {
    core::Plan p = *outcome.plan;
    p.choice.l2l->from_block = block;
    planner::check_choice(p, trace, "p.json");
    const auto predicted = planner::predict_step(costs, planner::LayerGraph(trace), p.choice);
    p.predicted.peak_bytes = predicted.peak_bytes;
    p.predicted.step_seconds = static_cast<double>(predicted.step_ns) / 1e9;
    p.budget_bytes = std::max(p.budget_bytes, predicted.peak_bytes);
    return p;
  };
  const core::Plan plan = offloaded_from(core::L2LChoice::kWholeModel);

  executor::ExecuteOptions options;
  options.steps = 2;
  options.warmup_steps = 1;
  const core::Report report = executor::execute(plan, trace, "p.json", options);
  ASSERT_EQ(report.status, "ok");
  ASSERT_TRUE(report.l2l);
  EXPECT_EQ(report.budget_bytes, plan.budget_bytes);
  EXPECT_GT(report.measured.peak_bytes, 0);
  EXPECT_LE(report.measured.peak_bytes, plan.budget_bytes);
  EXPECT_GE(report.predicted.peak_bytes, report.measured.peak_bytes);
  EXPECT_LE(std::abs(report.peak_rel_error), 0.02);
  ASSERT_TRUE(report.gradient_check.computed);
  EXPECT_LE(report.gradient_check.max_rel_diff, 1e-5);
  // The host held the training state: at least the parameters and Adam's state (each stage's
  // gradients live there only from its offload to its optimizer step).
  EXPECT_GE(report.l2l->measured_host_peak_bytes, costs.param_bytes() + costs.optimizer_state_bytes());
  EXPECT_EQ(report.l2l->stages, static_cast<int>(planner::l2l_stage_costs(trace).size()));
  std::printf("L2L plan of %zu micro-batches of %lld, %s, budget %lld: predicted peak %lld, measured %lld (%.2f%%), gradient check %.2e, host %lld\n",
              plan.choice.micro_batches.size(), static_cast<long long>(plan.choice.micro_batches.front()),
              plan.choice.l2l->boundaries_on_host ? "host boundaries" : "device boundaries",
              static_cast<long long>(plan.budget_bytes), static_cast<long long>(report.predicted.peak_bytes),
              static_cast<long long>(report.measured.peak_bytes), 100 * report.peak_rel_error,
              report.gradient_check.max_rel_diff, static_cast<long long>(report.l2l->measured_host_peak_bytes));

  // The same plan offloaded from block 1 on: the embeddings and block 0 stay on the device, under the
  // same enforced budget counted from before they arrived, the peak as predicted.
  const core::Plan later = offloaded_from(1);
  const core::Report kept = executor::execute(later, trace, "p.json", options);
  ASSERT_EQ(kept.status, "ok");
  ASSERT_TRUE(kept.l2l);
  EXPECT_EQ(kept.l2l->kept_stages, 2);
  EXPECT_LE(kept.measured.peak_bytes, later.budget_bytes);
  EXPECT_GE(kept.predicted.peak_bytes, kept.measured.peak_bytes);
  EXPECT_LE(std::abs(kept.peak_rel_error), 0.02);
  EXPECT_LE(kept.gradient_check.max_rel_diff, 1e-5);
  // The host no longer holds the kept stages' parameters and Adam state.
  EXPECT_LT(kept.l2l->measured_host_peak_bytes, report.l2l->measured_host_peak_bytes);
  std::printf("from block 1: predicted peak %lld, measured %lld (%.2f%%), host %lld\n",
              static_cast<long long>(kept.predicted.peak_bytes), static_cast<long long>(kept.measured.peak_bytes),
              100 * kept.peak_rel_error, static_cast<long long>(kept.l2l->measured_host_peak_bytes));
}

}  // namespace
}  // namespace headroom
