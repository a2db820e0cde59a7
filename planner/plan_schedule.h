#pragma once
// A plan's step as a schedule for the simulator, from the plan and its trace: what `headroom
// simulate` runs and what the GUI draws as the memory timeline.
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/schedule.h"
#include "core/trace.h"
#include "planner/layer_graph.h"

namespace headroom::planner {

// One flag per LayerGraph block: is it checkpointed in the plan. Throws InputError (prefixed with
// `source`) for a block the trace lacks or one that cannot be checkpointed.
std::vector<bool> checkpoint_flags(const core::Plan& plan, const LayerGraph& graph, const std::string& source);

// One flag per layer: does it run Tempo's lean variant in the plan. Throws InputError for a flag on
// a layer whose lean variant the trace did not measure (or cannot be chosen alone).
std::vector<bool> lean_flags(const core::Plan& plan, const LayerGraph& graph, const std::string& source);

// The plan's step as tasks, with the optimizer the plan was made for.
core::Schedule plan_schedule(const core::Trace& trace, const core::Plan& plan, const std::string& source);

}  // namespace headroom::planner
