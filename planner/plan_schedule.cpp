#include "planner/plan_schedule.h"

#include "core/cost_model.h"
#include "core/errors.h"
#include "planner/micro_batch_model.h"
#include "planner/optimizer_estimate.h"

namespace headroom::planner {

void check_choice(const core::Plan& plan, const LayerGraph& graph, const std::string& source) {
  const core::StepChoice& choice = plan.choice;
  checkpointed_block_flags(graph, choice, source);
  if (choice.layers.size() != graph.size()) {
    throw core::InputError(source + ": $.layers: the plan has " + std::to_string(choice.layers.size()) +
                           " layers, its trace " + std::to_string(graph.size()));
  }
  for (const auto& layer : choice.layers) {
    if (layer.variant == core::LayerVariant::Tempo && !graph.can_be_lean(layer.id)) {
      throw core::InputError(source + ": $.layers[" + std::to_string(layer.id) + "].variant: layer " + layer.name +
                             " has no lean variant the trace measured");
    }
  }
  if (choice.world_size != 1) {
    throw core::InputError(source + ": $.world_size: " + std::to_string(choice.world_size) +
                           " replicas, but data parallel is not implemented yet (1 only)");
  }
}

core::Schedule plan_schedule(const core::Trace& trace, const core::Plan& plan, const std::string& source) {
  const core::Trace planned = plan.optimizer.empty() ? trace : with_estimated_optimizer(trace, plan.optimizer);
  const core::CostModel costs(planned);
  const LayerGraph graph(planned);
  check_choice(plan, graph, source);
  return build_schedule(costs, graph, plan.choice);
}

}  // namespace headroom::planner
