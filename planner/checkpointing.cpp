// Checkpointing as a technique (planner/technique.h): which blocks are recomputed is chosen by the
// dynamic programming in checkpoint_dp.h, and run by the step sequence (step_sequence.h).
#include <string>

#include "core/errors.h"
#include "planner/plan_search.h"
#include "planner/technique.h"

namespace headroom::planner {

namespace {

class Checkpointing final : public Technique {
 public:
  std::optional<Strategy> strategy() const override { return Strategy::Checkpointing; }
  bool used_by(const core::StepChoice& choice) const override { return !choice.checkpointed_blocks.empty(); }
  void open(SearchSpace& space, const core::Trace&, const LayerGraph&, const PlanRequest& request) const override {
    space.checkpointing = request.strategies.contains(Strategy::Checkpointing);
  }
  void summarize(const core::StepChoice& choice, std::vector<SummaryLine>& lines) const override {
    const auto& blocks = choice.checkpointed_blocks;
    std::string text = blocks.empty() ? "none" : std::to_string(blocks.size()) + (blocks.size() > 1 ? " blocks:" : " block:");
    for (const int b : blocks) text += " " + std::to_string(b);
    lines.push_back({"checkpointed", text});
  }
  void check(const CheckedChoice& c) const override {
    for (const int id : c.choice.checkpointed_blocks) {
      const BlockSpan* span = c.graph.block_with_id(id);
      if (span == nullptr) throw core::InputError(c.source + ": $.checkpointed_blocks: the trace has no block " + std::to_string(id));
      if (!span->checkpointable) {
        throw core::InputError(c.source + ": block " + std::to_string(id) + " cannot be checkpointed: " + span->why_not);
      }
    }
  }
};

}  // namespace

const Technique& checkpointing_technique() {
  static const Checkpointing technique;
  return technique;
}

}  // namespace headroom::planner
