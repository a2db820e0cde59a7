// The predicted peak is an upper bound: each zoo model, planned at the least budget any
// plan fits with no safety margin, runs within that budget, and the prediction is tight (within 1%
// above the measurement). The configurations and batches are those of the committed traces.
#include <gtest/gtest.h>

#include "executor/executor.h"
#include "models/zoo.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "profiler/profiler.h"

namespace headroom {
namespace {

struct Case {
  std::string model;
  std::map<std::string, std::string> config;
  std::int64_t batch;
};

class LeastBudget : public ::testing::TestWithParam<Case> {};

TEST_P(LeastBudget, RunsWithinItWithNoMarginAndIsPredictedWithinOnePercent) {
  const Case& c = GetParam();
  models::Model model = models::build_zoo_model(c.model, c.config, 0);
  profiler::ProfileOptions options;
  options.batch_sizes = {1, 2, 4, 8, 16};
  options.repeats = 1;
  const core::Trace trace = profiler::profile(model, options);

  planner::PlanRequest request;
  request.global_batch = c.batch;
  request.margin_fraction = 0;
  request.strategies = {planner::Strategy::MicroBatching, planner::Strategy::Checkpointing};
  if (trace.has_tempo()) request.strategies.insert(planner::Strategy::Tempo);
  request.budget_bytes = 1;
  request.budget_bytes = planner::plan_step(trace, request).smallest_budget;
  ASSERT_GT(request.budget_bytes, 0);
  const auto outcome = planner::plan_step(trace, request);
  ASSERT_TRUE(outcome.plan) << outcome.reason;
  const core::Plan& plan = *outcome.plan;

  executor::ExecuteOptions run;
  run.steps = 2;
  run.gradient_check = false;
  const core::Report report = executor::execute(plan, trace, "least.json", run);
  if (report.status != "ok") {
    run.enforce_budget = false;
    const core::Report free = executor::execute(plan, trace, "least.json", run);
    std::printf("%s without the budget: measured %lld, predicted %lld at %s (%zu micro-batches of %lld)\n", c.model.c_str(),
                static_cast<long long>(free.measured.peak_bytes), static_cast<long long>(plan.predicted.peak_bytes),
                plan.peak_at.c_str(), plan.choice.micro_batches.size(), static_cast<long long>(plan.choice.micro_batches[0]));
  }
  ASSERT_EQ(report.status, "ok") << c.model << " ran out at the budget the planner called enough: "
                                 << report.out_of_memory->phase << " of " << report.out_of_memory->layer << ", "
                                 << report.out_of_memory->requested_bytes << " B asked with "
                                 << report.out_of_memory->in_use_bytes << " of " << report.out_of_memory->budget_bytes
                                 << " in use";
  const auto measured = static_cast<double>(report.measured.peak_bytes);
  const auto predicted = static_cast<double>(plan.predicted.peak_bytes);
  std::printf("%s batch %lld at %lld B (%zu micro-batches, %zu checkpointed, %d tempo): predicted %.0f, measured %.0f "
              "(%+.3f%%)\n",
              c.model.c_str(), static_cast<long long>(c.batch), static_cast<long long>(plan.budget_bytes),
              plan.choice.micro_batches.size(), plan.choice.checkpointed_blocks.size(), plan.choice.tempo_count(),
              predicted, measured, 100 * (predicted - measured) / measured);
  EXPECT_LE(report.measured.peak_bytes, plan.budget_bytes);
  EXPECT_GE(predicted, measured);
  EXPECT_LE(predicted, 1.01 * measured);
}

INSTANTIATE_TEST_SUITE_P(Zoo, LeastBudget,
                         ::testing::Values(Case{"mlp", {}, 64}, Case{"cnn", {}, 64},
                                           Case{"gpt", {{"preset", "tiny"}}, 16}, Case{"bert", {{"preset", "mini"}}, 16}),
                         [](const auto& info) { return info.param.model; });

}  // namespace
}  // namespace headroom
