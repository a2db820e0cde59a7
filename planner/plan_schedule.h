#pragma once
// A plan's step as a schedule for the simulator, from the plan and its trace: what `headroom
// simulate` runs and what the GUI draws as the memory timeline.
#include <string>

#include "core/plan.h"
#include "core/schedule.h"
#include "core/trace.h"
#include "planner/layer_graph.h"

namespace headroom::planner {

// Checks the plan against its trace: the model and its layers are the trace's (count and names),
// every checkpointed block exists and can be checkpointed, and every variant is one the trace
// measured for that layer (and can be chosen alone). Throws InputError prefixed with `source`.
void check_choice(const core::Plan& plan, const core::Trace& trace, const std::string& source);

// The plan's step as tasks, with the optimizer the plan was made for.
core::Schedule plan_schedule(const core::Trace& trace, const core::Plan& plan, const std::string& source);

}  // namespace headroom::planner
