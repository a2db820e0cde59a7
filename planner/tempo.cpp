// Tempo as a technique (planner/technique.h): memory-lean variants of the layers the trace measured
// them for, chosen by the search (plan_search.cpp) and run by the step sequence (step_sequence.h).
#include <string>
#include <vector>

#include "core/errors.h"
#include "planner/plan_search.h"
#include "planner/technique.h"

namespace headroom::planner {

namespace {

class Tempo final : public Technique {
 public:
  std::optional<Strategy> strategy() const override { return Strategy::Tempo; }
  bool used_by(const core::StepChoice& choice) const override { return choice.tempo_count() > 0; }
  void open(SearchSpace& space, const core::Trace&, const LayerGraph& graph, const PlanRequest& request) const override {
    space.tempo = request.strategies.contains(Strategy::Tempo) && !graph.tempo_candidates().empty();
  }
  void summarize(const core::StepChoice& choice, std::vector<SummaryLine>& lines) const override {
    std::vector<std::string> tempo;
    for (const auto& layer : choice.layers) {
      if (layer.variant == core::LayerVariant::Tempo) tempo.push_back(layer.name);
    }
    std::string text = tempo.empty() ? "none" : std::to_string(tempo.size()) + (tempo.size() > 1 ? " layers:" : " layer:");
    for (std::size_t i = 0; i < tempo.size() && i < 4; ++i) text += (i ? ", " : " ") + tempo[i];
    if (tempo.size() > 4) text += " and " + std::to_string(tempo.size() - 4) + " more";
    lines.push_back({"tempo", text});
  }
  void check(const CheckedChoice& c) const override {
    for (const auto& layer : c.choice.layers) {
      if (layer.variant == core::LayerVariant::Tempo && !c.graph.can_be_tempo(layer.id)) {
        throw core::InputError(c.source + ": $.layers[" + std::to_string(layer.id) + "].variant: layer " + layer.name +
                               " has no Tempo variant the trace measured");
      }
    }
  }
  void explain(const ChosenStep& step, std::vector<std::string>& warnings) const override {
    if (step.trace.model.is_users_module() && step.request.strategies.contains(Strategy::Tempo)) {
      warnings.push_back("Tempo does not apply to a module of your own: its memory-lean layers are headroom's own "
                         "implementations of the zoo's layers (checkpointing and micro-batching do apply)");
    }
  }
};

}  // namespace

const Technique& tempo_technique() {
  static const Tempo technique;
  return technique;
}

}  // namespace headroom::planner
