#include "planner/technique.h"

#include <array>
#include <stdexcept>

namespace headroom::planner {

std::span<const Technique* const> techniques() {
  static const std::array<const Technique*, 7> all = [] {
    const std::array<const Technique*, 7> registered{&micro_batching_technique(), &checkpointing_technique(),
                                                     &tempo_technique(),          &infcl_technique(),
                                                     &l2l_technique(),            &data_parallel_technique(),
                                                     &ring_loss_technique()};
    // The table's entries first, in its order (a plan lists its strategies so), each once.
    const auto table = strategy_table();
    if (table.size() > registered.size()) throw std::logic_error("techniques(): a table entry without its technique");
    for (std::size_t i = 0; i < table.size(); ++i) {
      if (registered[i]->strategy() != table[i].id) throw std::logic_error("techniques(): not in the strategy table's order");
    }
    for (std::size_t i = table.size(); i < registered.size(); ++i) {
      if (registered[i]->strategy()) throw std::logic_error("techniques(): a table entry registered twice");
    }
    return registered;
  }();
  return all;
}

std::map<std::string, double> predicted_parts(const ChosenStep& step) {
  std::map<std::string, double> parts;
  for (const Technique* technique : techniques()) {
    if (technique->used_by(step.choice)) technique->predict_parts(step, parts);
  }
  return parts;
}

const Technique* step_runner(const core::StepChoice& choice) {
  for (const Technique* technique : techniques()) {
    if (technique->runs_the_step(choice)) return technique;
  }
  return nullptr;
}

}  // namespace headroom::planner
