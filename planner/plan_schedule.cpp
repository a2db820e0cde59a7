#include "planner/plan_schedule.h"

#include "core/cost_model.h"
#include "core/errors.h"
#include "planner/optimizer_estimate.h"
#include "planner/step_sequence.h"
#include "planner/technique.h"

namespace headroom::planner {

void check_choice(const core::Plan& plan, const core::Trace& trace, const std::string& source) {
  const core::StepChoice& choice = plan.choice;
  if (plan.model != trace.model.name) {
    throw core::InputError(source + ": $.trace.model: the plan is for " + plan.model + ", its trace profiled " +
                           trace.model.name);
  }
  if (choice.layers.size() != trace.layers.size()) {
    throw core::InputError(source + ": $.layers: the plan has " + std::to_string(choice.layers.size()) +
                           " layers, its trace " + std::to_string(trace.layers.size()));
  }
  for (std::size_t i = 0; i < choice.layers.size(); ++i) {
    if (choice.layers[i].name != trace.layers[i].name) {
      throw core::InputError(source + ": $.layers[" + std::to_string(i) + "].name: '" + choice.layers[i].name +
                             "', but the trace's layer " + std::to_string(i) + " is '" + trace.layers[i].name + "'");
    }
  }
  const LayerGraph graph(trace);
  for (const Technique* technique : techniques()) technique->check({trace, graph, choice, source});
}

core::Schedule plan_schedule(const core::Trace& trace, const core::Plan& plan, const std::string& source) {
  const core::Trace planned = plan.optimizer.empty() ? trace : with_estimated_optimizer(trace, plan.optimizer);
  const core::CostModel costs(planned);
  const LayerGraph graph(planned);
  check_choice(plan, planned, source);
  return build_schedule(costs, graph, plan.choice);
}

}  // namespace headroom::planner
