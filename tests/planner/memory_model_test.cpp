#include <gtest/gtest.h>

#include "core/cost_model.h"
#include "planner/layer_graph.h"
#include "planner/step_sequence.h"
#include "simulator/simulator.h"
#include "support/plan_requests.h"

namespace headroom {
namespace {

using testing::committed;
using testing::kTraces;

// The planner's model of a plain step (one micro-batch, nothing applied) reproduces the peak the
// profiler measured at every sampled size.
TEST(MemoryModel, ReproducesMeasuredPeaks) {
  for (const auto& name : kTraces) {
    const core::Trace trace = committed(name);
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    for (std::size_t k = 0; k < trace.batch_sizes.size(); ++k) {
      const auto p = planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({trace.batch_sizes[k]}));
      const double measured = static_cast<double>(trace.steps[k].peak_bytes);
      EXPECT_NEAR(static_cast<double>(p.peak_bytes) / measured, 1.0, 1e-3) << name << " batch " << trace.batch_sizes[k];
      // One micro-batch as the trace measured it (the profiled step less its optimizer, or the
      // sequence's micro-batch in traces that have one) plus what a step pays once; each layer's
      // scaled time is rounded to a nanosecond.
      EXPECT_NEAR(p.step_ns, costs.micro_batch_ns(trace.batch_sizes[k]) + costs.optimizer_ns(),
                  static_cast<double>(trace.layers.size())) << name;
    }
  }
}

// What the device's libraries keep allocated between steps (a CUDA trace's workspace_bytes:
// cuBLAS's workspaces) is static state: every plan's peak carries it once, its time nothing, and
// the simulated timeline holds it as a band of its own from the first sample to the last.
TEST(MemoryModel, TheLibrariesWorkspaceIsHeldThroughEveryStep) {
  core::Trace trace = committed("cpu-bert.json");
  const planner::LayerGraph graph(trace);
  core::StepChoice plain = core::StepChoice{}.with_micro_batches({8, 8});
  core::StepChoice checkpointed = plain;
  checkpointed.checkpointed_blocks = {0, 1};
  const std::vector<core::StepChoice> choices{plain, checkpointed};
  std::vector<planner::StepPrediction> without;
  for (const auto& choice : choices) without.push_back(planner::predict_step(core::CostModel(trace), graph, choice));
  constexpr std::int64_t kWorkspace = std::int64_t{64} << 20;
  trace.workspace_bytes = kWorkspace;
  const core::CostModel costs(trace);
  EXPECT_EQ(costs.static_bytes(), core::CostModel(committed("cpu-bert.json")).static_bytes() + kWorkspace);
  for (std::size_t c = 0; c < choices.size(); ++c) {
    const auto p = planner::predict_step(costs, graph, choices[c]);
    EXPECT_EQ(p.peak_bytes, without[c].peak_bytes + kWorkspace) << c;
    EXPECT_EQ(p.step_ns, without[c].step_ns) << c;
    const auto sim = simulator::simulate(planner::build_schedule(costs, graph, choices[c]));
    EXPECT_EQ(sim.peak_bytes, p.peak_bytes) << c;
    ASSERT_FALSE(sim.memory.empty());
    for (const auto& sample : sim.memory) {
      EXPECT_EQ(sample.bytes[static_cast<std::size_t>(core::MemoryKind::Workspace)], kWorkspace);
    }
  }
}

}  // namespace
}  // namespace headroom
