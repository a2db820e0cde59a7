#include <gtest/gtest.h>

#include "core/cost_model.h"
#include "core/errors.h"
#include "core/plan.h"
#include "core/step_choice.h"
#include "planner/layer_graph.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "simulator/simulator.h"
#include "support/plan_requests.h"

namespace headroom {
namespace {

using testing::budget_sweep;
using testing::committed;
using testing::request;

// Tempo: with every lean layer on, the planner's model reproduces the peak the profiler measured
// in its all-lean pass, at every sampled size (the frees a lean layer moves included).
TEST(Tempo, ModelReproducesTheLeanPassPeaks) {
  for (const std::string name : {"cpu-bert.json", "cpu-gpt.json"}) {
    const core::Trace trace = committed(name);
    ASSERT_TRUE(trace.has_tempo()) << name;
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    const core::StepChoice lean = graph.all_lean();
    int lean_kinds = 0;
    for (const auto& layer : trace.layers) lean_kinds += layer.tempo.has_value();
    EXPECT_EQ(static_cast<int>(graph.lean_candidates().size()), lean_kinds) << name << ": every lean layer can be chosen alone";
    for (std::size_t k = 0; k < trace.batch_sizes.size(); ++k) {
      const auto p = planner::predict_step(costs, graph, lean.with_micro_batches({trace.batch_sizes[k]}));
      EXPECT_NEAR(static_cast<double>(p.peak_bytes) / static_cast<double>(trace.tempo_steps[k].peak_bytes), 1.0, 1e-3)
          << name << " batch " << trace.batch_sizes[k];
    }
    // At the largest size Tempo keeps less.
    EXPECT_LT(trace.tempo_steps.back().peak_bytes, trace.steps.back().peak_bytes) << name;
  }
}

// Tempo is a per-layer choice: under a budget between the all-lean need and the standard need it
// makes some layers lean, the plan fits, and the simulator agrees; with room to spare it makes none.
TEST(Tempo, PlannerMakesLayersLeanOnlyAsNeeded) {
  for (const std::string name : {"cpu-bert.json", "cpu-gpt.json"}) {
    SCOPED_TRACE(name);
    const core::Trace trace = committed(name);
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    const std::int64_t batch = trace.batch_sizes.back();
    const std::int64_t standard = planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({batch})).peak_bytes;
    const std::int64_t lean = planner::predict_step(costs, graph, graph.all_lean().with_micro_batches({batch})).peak_bytes;
    ASSERT_LT(lean, standard);
    // A budget whose limit after the 5% margin sits halfway between the two needs.
    const auto budget = static_cast<std::int64_t>(static_cast<double>(lean + standard) / 2 / 0.95);
    EXPECT_FALSE(planner::plan_step(trace, request(budget, batch, "none")).plan);
    const auto outcome = planner::plan_step(trace, request(budget, batch, "tempo"));
    ASSERT_TRUE(outcome.plan) << outcome.reason;
    const core::Plan& plan = *outcome.plan;
    EXPECT_EQ(plan.choice.micro_batches, std::vector<std::int64_t>{batch});
    EXPECT_EQ(plan.strategies, std::vector<std::string>{"tempo"});
    int lean_layers = 0;
    for (const auto& layer : plan.choice.layers) {
      if (layer.variant != core::LayerVariant::Tempo) continue;
      ++lean_layers;
      EXPECT_TRUE(graph.can_be_lean(layer.id)) << layer.name;
    }
    EXPECT_GT(lean_layers, 0);
    EXPECT_LE(lean_layers, static_cast<int>(graph.lean_candidates().size()));
    EXPECT_LE(plan.predicted.peak_bytes, plan.budget_bytes - plan.margin_bytes);
    const auto sim = simulator::simulate(planner::plan_schedule(trace, plan, name));
    EXPECT_EQ(sim.peak_bytes, plan.predicted.peak_bytes);
    // The choices survive the plan file. A plan written before the step choice (a "tempo" flag per
    // layer) reads the same; one from before Tempo (neither) has nothing lean.
    auto document = core::to_json(plan);
    EXPECT_EQ(core::plan_from_json(document), plan);
    auto flagged = document;
    for (auto& layer : flagged["layers"]) {
      layer["tempo"] = layer["variant"] == "tempo";
      layer.erase("variant");
    }
    EXPECT_EQ(core::plan_from_json(flagged), plan);
    for (auto& layer : document["layers"]) layer.erase("variant");
    EXPECT_EQ(core::plan_from_json(document).choice.lean_count(), 0);

    // Enough budget for the standard step: lean only where the lean variant was measured no slower.
    const auto roomy = planner::plan_step(trace, request(standard * 2, batch, "tempo"));
    ASSERT_TRUE(roomy.plan);
    for (const auto& layer : roomy.plan->choice.layers) {
      if (layer.variant != core::LayerVariant::Tempo) continue;
      const auto i = static_cast<std::size_t>(layer.id);
      const auto s = costs.layer(i, batch), l = costs.lean_layer(i, batch);
      EXPECT_LE(l.fwd_ns + l.bwd_ns, s.fwd_ns + s.bwd_ns) << layer.name;
    }
    // Tempo lowers the least budget that fits, with and without the other strategies.
    EXPECT_LT(planner::plan_step(trace, request(1, batch, "tempo")).smallest_budget,
              planner::plan_step(trace, request(1, batch, "none")).smallest_budget);
    EXPECT_LE(planner::plan_step(trace, request(1, batch, "all")).smallest_budget,
              planner::plan_step(trace, request(1, batch, "mbp,checkpoint")).smallest_budget);
  }
}

// Allowing Tempo never makes a plan slower or infeasible: the search without it is part of the
// search with it.
TEST(Tempo, NeverMakesAPlanSlower) {
  for (const std::string name : {"cpu-bert.json", "cpu-gpt.json"}) {
    SCOPED_TRACE(name);
    const core::Trace trace = committed(name);
    int with_tempo = 0;
    for (const std::int64_t budget : budget_sweep(trace, 32, 40)) {
      const auto without = planner::plan_step(trace, request(budget, 32, "mbp,checkpoint"));
      const auto with = planner::plan_step(trace, request(budget, 32, "all"));
      if (!without.plan) {
        EXPECT_LE(with.smallest_budget, without.smallest_budget) << budget;
        continue;
      }
      ASSERT_TRUE(with.plan) << budget;
      EXPECT_LE(with.plan->predicted.peak_bytes, with.plan->budget_bytes - with.plan->margin_bytes);
      EXPECT_GE(with.plan->predicted.samples_per_second, without.plan->predicted.samples_per_second * (1 - 1e-12))
          << budget;
      with_tempo += with.plan->choice.lean_count();
    }
    EXPECT_GT(with_tempo, 0);
  }
}

// A plan that makes a layer lean whose lean variant the trace did not measure is bad input.
TEST(Tempo, LeanFlagOnALayerWithoutAVariantIsRejected) {
  const core::Trace trace = committed("cpu-bert.json");
  const planner::LayerGraph graph(trace);
  auto outcome = planner::plan_step(trace, request(1LL << 40, 4));
  ASSERT_TRUE(outcome.plan);
  core::Plan plan = *outcome.plan;
  int linear = -1;
  for (const auto& layer : trace.layers) {
    if (layer.kind == "linear") {
      linear = layer.id;
      break;
    }
  }
  ASSERT_GE(linear, 0);
  plan.choice.layers[static_cast<std::size_t>(linear)].variant = core::LayerVariant::Tempo;
  try {
    planner::check_choice(plan, trace, "p.json");
    FAIL() << "expected an InputError";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("p.json: $.layers[" + std::to_string(linear) + "].variant"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace headroom
