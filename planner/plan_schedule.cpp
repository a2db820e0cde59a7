#include "planner/plan_schedule.h"

#include "core/cost_model.h"
#include "core/errors.h"
#include "planner/micro_batch_model.h"
#include "planner/optimizer_estimate.h"

namespace headroom::planner {

std::vector<bool> checkpoint_flags(const core::Plan& plan, const LayerGraph& graph, const std::string& source) {
  std::vector<bool> flags(graph.blocks().size(), false);
  for (const int block : plan.checkpointed_blocks) {
    bool found = false;
    for (std::size_t k = 0; k < graph.blocks().size(); ++k) {
      if (graph.blocks()[k].block != block) continue;
      if (!graph.blocks()[k].checkpointable) {
        throw core::InputError(source + ": block " + std::to_string(block) + " cannot be checkpointed: " +
                               graph.blocks()[k].why_not);
      }
      flags[k] = found = true;
    }
    if (!found) throw core::InputError(source + ": $.checkpointed_blocks: the trace has no block " + std::to_string(block));
  }
  return flags;
}

std::vector<bool> lean_flags(const core::Plan& plan, const LayerGraph& graph, const std::string& source) {
  std::vector<bool> flags(graph.size(), false);
  if (plan.layers.size() != graph.size()) {
    throw core::InputError(source + ": $.layers: the plan has " + std::to_string(plan.layers.size()) +
                           " layers, its trace " + std::to_string(graph.size()));
  }
  for (const auto& layer : plan.layers) {
    if (!layer.tempo) continue;
    if (!graph.can_be_lean(layer.id)) {
      throw core::InputError(source + ": $.layers[" + std::to_string(layer.id) + "].tempo: layer " + layer.name +
                             " has no lean variant the trace measured");
    }
    flags[static_cast<std::size_t>(layer.id)] = true;
  }
  return flags;
}

core::Schedule plan_schedule(const core::Trace& trace, const core::Plan& plan, const std::string& source) {
  const core::Trace planned = plan.optimizer.empty() ? trace : with_estimated_optimizer(trace, plan.optimizer);
  const core::CostModel costs(planned);
  const LayerGraph graph(planned);
  return build_schedule(costs, graph, plan.micro_batches, checkpoint_flags(plan, graph, source),
                        lean_flags(plan, graph, source));
}

}  // namespace headroom::planner
