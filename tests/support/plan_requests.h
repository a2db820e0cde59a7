#pragma once
// The committed CPU traces and the plan requests the planner's tests make of them.
// HEADROOM_TRACES_DIR is the repository's traces/ folder (support/build_paths.h).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/step_choice.h"
#include "core/trace.h"
#include "planner/layer_graph.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "support/build_paths.h"

namespace headroom::testing {

inline core::Trace committed(const std::string& name) {
  return core::read_trace_file(std::filesystem::path(HEADROOM_TRACES_DIR) / name);
}

inline const std::vector<std::string> kTraces = {"cpu-mlp.json", "cpu-cnn.json", "cpu-bert.json", "cpu-gpt.json", "cpu-clip.json"};

inline planner::PlanRequest request(std::int64_t budget, std::int64_t batch, const std::string& strategies = "all") {
  planner::PlanRequest r;
  r.budget_bytes = budget;
  r.global_batch = batch;
  r.strategies = planner::parse_strategies(strategies);
  r.trace_path = "traces/x.json";
  r.trace_sha256 = std::string(64, '0');
  return r;
}

// Budgets from the static floor up to the whole batch's need, for each committed trace.
inline std::vector<std::int64_t> budget_sweep(const core::Trace& trace, std::int64_t batch, int points) {
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const std::int64_t lo = costs.static_bytes() + costs.optimizer_transient_bytes();
  // Up to past what the whole batch needs once the 5% margin is taken off.
  const std::int64_t hi =
      planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({batch})).peak_bytes * 23 / 20;
  std::vector<std::int64_t> budgets;
  for (int i = 0; i <= points; ++i) budgets.push_back(lo + (hi - lo) * i / points);
  return budgets;
}

}  // namespace headroom::testing
