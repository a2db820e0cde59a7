// A contrastive model's micro-batched step under the gradient cache (executor/grad_cache.h), predicted
// as it runs.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/cost_model.h"
#include "executor/executor.h"
#include "models/zoo.h"
#include "planner/layer_graph.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "profiler/profiler.h"

namespace headroom {
namespace {

// A contrastive model micro-batched runs under a gradient cache: the loss over the whole batch once,
// then each micro-batch again through the cache's surrogate. The surrogate measured alone also holds
// the gradients of both embeddings, which in the step the towers' backward counts: counted twice, the
// peak micro-batch was 256 bytes a sample over (0.24% at these sizes). Two sizes, neither profiled,
// and a peak in the text tower, where no layer's bytes jump between profiled sizes.
TEST(GradientCache, AnUnevenMicroBatchedContrastiveStepIsPredictedAsMeasured) {
  models::Model model = models::build_zoo_model("clip", {{"layers", "2"}, {"width", "16"}}, 0);
  profiler::ProfileOptions options;
  options.batch_sizes = {8, 16, 32, 64};
  options.repeats = 1;
  const core::Trace trace = profiler::profile(model, options);

  planner::PlanRequest request;
  request.global_batch = 64;
  request.budget_bytes = std::int64_t{1} << 40;
  request.margin_fraction = 0;
  request.strategies = {};
  const auto outcome = planner::plan_step(trace, request);
  ASSERT_TRUE(outcome.plan) << outcome.reason;
  core::Plan plan = *outcome.plan;
  const planner::LayerGraph graph(trace);
  core::StepChoice choice = plan.choice;
  choice.micro_batches = {17, 47};
  plan.choice = planner::complete_choice(trace, graph, choice);
  plan.predicted.peak_bytes = planner::predict_step(core::CostModel(trace), graph, plan.choice).peak_bytes;

  executor::ExecuteOptions run;
  run.steps = 2;
  run.enforce_budget = false;
  run.gradient_check = false;
  const core::Report report = executor::execute(plan, trace, "gradient-cache.json", run);
  ASSERT_EQ(report.status, "ok");
  const auto measured = static_cast<double>(report.measured.peak_bytes);
  const auto predicted = static_cast<double>(plan.predicted.peak_bytes);
  std::printf("clip [17, 47] under the gradient cache: predicted %.0f, measured %.0f (%+.3f%%)\n", predicted, measured,
              100 * (predicted - measured) / measured);
  EXPECT_GE(predicted, measured);
  EXPECT_LE(predicted, 1.0005 * measured);
}

}  // namespace
}  // namespace headroom
