// Inf-CL in the planner: the contrastive loss's fitted model against its own measurements, the
// gradient-cache step, and the search choosing the loss's tiles and the towers' micro-batches together.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/cost_model.h"
#include "core/errors.h"
#include "planner/infcl_model.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "simulator/simulator.h"
#include "support/build_paths.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

core::Trace clip_trace() { return core::read_trace_file(fs::path(HEADROOM_TRACES_DIR) / "cpu-clip.json"); }

planner::PlanRequest request(std::int64_t budget, std::int64_t batch, const std::string& strategies) {
  planner::PlanRequest r;
  r.budget_bytes = budget;
  r.global_batch = batch;
  r.margin_fraction = 0;
  r.strategies = planner::parse_strategies(strategies);
  r.trace_path = "cpu-clip.json";
  r.trace_sha256 = std::string(64, '0');
  return r;
}

// Memory is polynomial in the batch (the standard loss quadratic, a tile's and the surrogate's
// affine), to a few bytes: the fits through the largest samples, raised by the most they fall short
// of any other, are never under a sample, the ones they were not fitted through included, and over
// by at most 64 bytes (the 2-thread recordings are a few bytes off a line).
TEST(InfClPlanner, LossModelReproducesEveryMeasuredSample) {
  const core::Trace trace = clip_trace();
  ASSERT_TRUE(trace.contrastive_loss);
  const planner::ContrastiveLossModel model(*trace.contrastive_loss);
  int checked = 0;
  for (const auto& s : trace.contrastive_loss->samples) {
    SCOPED_TRACE(std::string(core::contrastive_mode_name(s.mode)) + " " + std::to_string(s.batch) + " " +
                 std::to_string(s.tile_rows));
    const core::LayerCost c = s.mode == core::ContrastiveMode::Surrogate ? model.surrogate(s.batch)
                              : s.mode == core::ContrastiveMode::Tiled
                                  ? model.loss(s.batch, core::LossTiles{s.tile_rows, s.tile_cols})
                                  : model.loss(s.batch, std::nullopt);
    const std::pair<std::int64_t, std::int64_t> fields[] = {{c.fwd_transient_bytes, s.fwd_transient_bytes},
                                                            {c.fwd_retained_bytes, s.fwd_retained_bytes},
                                                            {c.bwd_transient_bytes, s.bwd_transient_bytes},
                                                            {c.bwd_retained_bytes, s.bwd_retained_bytes}};
    for (const auto& [fitted, measured] : fields) {
      EXPECT_GE(fitted, measured);
      EXPECT_LE(fitted, measured + 64);
    }
    ++checked;
  }
  EXPECT_GE(checked, 10);
  // The standard loss grows with B^2, a tile's with B: at 65,536 pairs the standard one needs
  // the similarity matrix several times over, the tiled one a small fraction of one.
  const std::int64_t b = 65536;
  const auto standard = model.loss(b, std::nullopt);
  EXPECT_GT(standard.bwd_transient_bytes + standard.fwd_retained_bytes, 2 * b * b * 4);
  for (const auto& tiles : model.tiles()) {
    const auto tiled = model.loss(b, tiles);
    EXPECT_LT(tiled.fwd_retained_bytes + tiled.bwd_transient_bytes, b * b * 4 / 50);
  }
}

// A batch of 65,536 under 2 GiB: the standard loss alone needs far more, so only Inf-CL's tiles
// with the towers micro-batched under the gradient cache fit; the plan says so.
TEST(InfClPlanner, PlansTilesAndMicroBatchesWhereTheStandardLossCannotFit) {
  const core::Trace trace = clip_trace();
  const std::int64_t budget = std::int64_t{2} << 30, batch = 65536;
  EXPECT_FALSE(planner::plan_step(trace, request(budget, batch, "mbp,checkpoint")).plan);
  const auto outcome = planner::plan_step(trace, request(budget, batch, "all"));
  ASSERT_TRUE(outcome.plan);
  const core::Plan& plan = *outcome.plan;
  ASSERT_TRUE(plan.choice.loss_tiles);
  EXPECT_GT(plan.choice.micro_batches.size(), 1u);
  EXPECT_LE(plan.predicted.peak_bytes, budget);
  EXPECT_NE(std::find(plan.strategies.begin(), plan.strategies.end(), "infcl"), plan.strategies.end());
  bool scheme = false;
  for (const auto& w : plan.warnings) scheme |= w.find("gradient cache over") != std::string::npos;
  EXPECT_TRUE(scheme);
  planner::check_choice(plan, trace, "plan");
  // The plan reads back as written.
  EXPECT_EQ(core::plan_from_json(core::to_json(plan), "p.json").choice, plan.choice);
}

// Where nothing fits, the least budget named is one that fits, and it is least: the gradient cache
// keeps every micro-batch's RNG state, so the finest split is not the leanest (the search named
// 25.5 MiB for 4096 pairs while 12 MiB fitted).
TEST(InfClPlanner, TheLeastBudgetNamedIsTheLeastThatFits) {
  const core::Trace trace = clip_trace();
  const std::int64_t batch = 4096;
  const auto none = planner::plan_step(trace, request(std::int64_t{4} << 20, batch, "all"));
  ASSERT_FALSE(none.plan);
  const std::int64_t least = none.smallest_budget;
  ASSERT_GT(least, 0);
  EXPECT_TRUE(planner::plan_step(trace, request(least, batch, "all")).plan) << least;
  EXPECT_FALSE(planner::plan_step(trace, request(least * 99 / 100, batch, "all")).plan) << least;
}

// The gradient-cache step as the simulator runs it peaks and lasts as the planner predicts, and
// ends with only the static state; its runs of one micro-batch size repeat.
TEST(InfClPlanner, SimulatorAgreesOnTheGradientCacheStep) {
  const core::Trace trace = clip_trace();
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const auto model = planner::contrastive_loss_model(trace);
  ASSERT_TRUE(model);
  for (const auto& tiles : {std::optional<core::LossTiles>{}, std::optional<core::LossTiles>{model->tiles().front()}}) {
    for (const auto& sizes : {std::vector<std::int64_t>{8192}, std::vector<std::int64_t>{4096, 4096, 4096, 4095},
                              std::vector<std::int64_t>(16, 1024)}) {
      core::StepChoice choice = core::StepChoice{}.with_micro_batches(sizes);
      choice.loss_tiles = tiles;
      choice.checkpointed_blocks = {graph.blocks().front().block};
      const auto predicted = planner::predict_step(costs, graph, choice);
      const auto sim = simulator::simulate(planner::build_schedule(costs, graph, choice));
      EXPECT_EQ(sim.peak_bytes, predicted.peak_bytes);
      EXPECT_EQ(sim.makespan_ns, predicted.step_ns);
      EXPECT_EQ(sim.memory.back().total(), costs.static_bytes());
    }
  }
  // Micro-batched, the loss runs once over the whole batch: its ops appear once, named by the loss layer.
  core::StepChoice choice = core::StepChoice{}.with_micro_batches(std::vector<std::int64_t>(4, 2048));
  const auto schedule = planner::build_schedule(costs, graph, choice);
  int loss_tasks = 0, no_grad = 0;
  for (const auto& task : schedule.tasks) {
    loss_tasks += task.layer == model->layer() && task.category != "forward (checkpointed, no grad)";
    no_grad += task.category == "forward (checkpointed, no grad)";
  }
  EXPECT_EQ(loss_tasks, 4);  // the loss forward and backward, and the surrogate's in the repeated micro-batch
  EXPECT_GT(no_grad, 0);
}

TEST(InfClPlanner, RefusesTilesTheTraceDidNotMeasureOrCannotUse) {
  const core::Trace trace = clip_trace();
  auto plan = *planner::plan_step(trace, request(std::int64_t{2} << 30, 65536, "all")).plan;
  plan.choice.loss_tiles = core::LossTiles{3, 5};
  EXPECT_THROW(planner::check_choice(plan, trace, "p.json"), core::InputError);
  const core::Trace mlp = core::read_trace_file(fs::path(HEADROOM_TRACES_DIR) / "cpu-mlp.json");
  auto mlp_plan = *planner::plan_step(mlp, request(std::int64_t{1} << 30, 8, "all")).plan;
  EXPECT_FALSE(mlp_plan.choice.loss_tiles);
  mlp_plan.choice.loss_tiles = core::LossTiles{4, 4};
  EXPECT_THROW(planner::check_choice(mlp_plan, mlp, "p.json"), core::InputError);
}

}  // namespace
}  // namespace headroom
