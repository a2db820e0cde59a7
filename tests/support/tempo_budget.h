#pragma once
// A Tempo request that needs the Tempo layers to fit: the step of `batch` predicted whole with every
// layer standard and with every Tempo variant on, and a budget halfway between (after the margin).
#include <cstdint>

#include "core/cost_model.h"
#include "core/trace.h"
#include "planner/layer_graph.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"

namespace headroom::testing {

struct TempoBudget {
  std::int64_t standard = 0;  // the standard step's predicted peak
  std::int64_t tempo = 0;     // the all-Tempo step's
  planner::PlanRequest request;
};

inline TempoBudget tempo_budget(const core::Trace& trace, std::int64_t batch) {
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  TempoBudget out;
  out.standard = planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({batch})).peak_bytes;
  out.tempo = planner::predict_step(costs, graph, graph.all_tempo().with_micro_batches({batch})).peak_bytes;
  out.request.global_batch = batch;
  out.request.budget_bytes = static_cast<std::int64_t>(static_cast<double>(out.tempo + out.standard) / 2 / 0.95);
  out.request.strategies = {planner::Strategy::Tempo};
  return out;
}

}  // namespace headroom::testing
