#pragma once
// What `headroom plan` and `headroom simulate` print.
#include <string>
#include <vector>

#include "core/plan.h"
#include "planner/plan_for_machine.h"

namespace headroom::report {

std::string render_plan_summary(const core::Plan& plan);

// Each precision's plan for the same request side by side (`chosen`, the one the plan shown is for,
// marked *): micro-batches, checkpointed blocks, static bytes per parameter, predicted peak and
// samples/s against the chosen one's; why none fits where none does.
std::string render_precision_comparison(const std::vector<planner::PrecisionPlan>& rows, core::Precision chosen);

// Each shard stage the search weighed (planner::PlanOutcome::shard_stages) beside the chosen one
// (marked *): what worker 0 holds throughout, its fastest plan's peak and samples/s, or the least
// budget where none fits. Empty where the search weighed no stages.
std::string render_shard_stages(const std::vector<planner::PlanOutcome::ShardStage>& stages, const core::DataParallelChoice& chosen);

}  // namespace headroom::report
