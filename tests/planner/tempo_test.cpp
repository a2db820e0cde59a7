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

// Tempo: with every Tempo layer on, the planner's model reproduces the peak the profiler measured
// in its all-Tempo pass, at every sampled size (the frees a Tempo layer moves included).
TEST(Tempo, ModelReproducesTheTempoPassPeaks) {
  for (const std::string name : {"cpu-bert.json", "cpu-gpt.json"}) {
    const core::Trace trace = committed(name);
    ASSERT_TRUE(trace.has_tempo()) << name;
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    const core::StepChoice tempo = graph.all_tempo();
    int tempo_kinds = 0;
    for (const auto& layer : trace.layers) tempo_kinds += layer.tempo.has_value();
    EXPECT_EQ(static_cast<int>(graph.tempo_candidates().size()), tempo_kinds) << name << ": every Tempo layer can be chosen alone";
    for (std::size_t k = 0; k < trace.batch_sizes.size(); ++k) {
      const auto p = planner::predict_step(costs, graph, tempo.with_micro_batches({trace.batch_sizes[k]}));
      EXPECT_NEAR(static_cast<double>(p.peak_bytes) / static_cast<double>(trace.tempo_steps[k].peak_bytes), 1.0, 1e-3)
          << name << " batch " << trace.batch_sizes[k];
    }
    // At the largest size Tempo keeps less.
    EXPECT_LT(trace.tempo_steps.back().peak_bytes, trace.steps.back().peak_bytes) << name;
  }
}

// Tempo is a per-layer choice: under a budget between the all-Tempo need and the standard need it
// turns some Tempo layers on, the plan fits, and the simulator agrees; with room to spare it makes none.
TEST(Tempo, PlannerUsesTempoLayersOnlyAsNeeded) {
  for (const std::string name : {"cpu-bert.json", "cpu-gpt.json"}) {
    SCOPED_TRACE(name);
    const core::Trace trace = committed(name);
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    const std::int64_t batch = trace.batch_sizes.back();
    const std::int64_t standard = planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({batch})).peak_bytes;
    const std::int64_t tempo = planner::predict_step(costs, graph, graph.all_tempo().with_micro_batches({batch})).peak_bytes;
    ASSERT_LT(tempo, standard);
    // A budget whose limit after the 5% margin sits halfway between the two needs.
    const auto budget = static_cast<std::int64_t>(static_cast<double>(tempo + standard) / 2 / 0.95);
    EXPECT_FALSE(planner::plan_step(trace, request(budget, batch, "none")).plan);
    const auto outcome = planner::plan_step(trace, request(budget, batch, "tempo"));
    ASSERT_TRUE(outcome.plan) << outcome.reason;
    const core::Plan& plan = *outcome.plan;
    EXPECT_EQ(plan.choice.micro_batches, std::vector<std::int64_t>{batch});
    EXPECT_EQ(plan.strategies, std::vector<std::string>{"tempo"});
    int tempo_layers = 0;
    for (const auto& layer : plan.choice.layers) {
      if (layer.variant != core::LayerVariant::Tempo) continue;
      ++tempo_layers;
      EXPECT_TRUE(graph.can_be_tempo(layer.id)) << layer.name;
    }
    EXPECT_GT(tempo_layers, 0);
    EXPECT_LE(tempo_layers, static_cast<int>(graph.tempo_candidates().size()));
    EXPECT_LE(plan.predicted.peak_bytes, plan.budget_bytes - plan.margin_bytes);
    const auto sim = simulator::simulate(planner::plan_schedule(trace, plan, name));
    EXPECT_EQ(sim.peak_bytes, plan.predicted.peak_bytes);
    // The choices survive the plan file. A plan written before the step choice (a "tempo" flag per
    // layer) reads the same; one from before Tempo (neither) has no Tempo layer.
    auto document = core::to_json(plan);
    EXPECT_EQ(core::plan_from_json(document), plan);
    auto flagged = document;
    for (auto& layer : flagged["layers"]) {
      layer["tempo"] = layer["variant"] == "tempo";
      layer.erase("variant");
    }
    EXPECT_EQ(core::plan_from_json(flagged), plan);
    for (auto& layer : document["layers"]) layer.erase("variant");
    EXPECT_EQ(core::plan_from_json(document).choice.tempo_count(), 0);

    // Enough budget for the standard step: Tempo layers only where the Tempo variant was measured no slower.
    const auto roomy = planner::plan_step(trace, request(standard * 2, batch, "tempo"));
    ASSERT_TRUE(roomy.plan);
    for (const auto& layer : roomy.plan->choice.layers) {
      if (layer.variant != core::LayerVariant::Tempo) continue;
      const auto i = static_cast<std::size_t>(layer.id);
      const auto s = costs.layer(i, batch), l = costs.tempo_layer(i, batch);
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
      with_tempo += with.plan->choice.tempo_count();
    }
    EXPECT_GT(with_tempo, 0);
  }
}

// A plan that makes a layer a Tempo layer whose Tempo variant the trace did not measure is bad input.
TEST(Tempo, TempoFlagOnALayerWithoutAVariantIsRejected) {
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
