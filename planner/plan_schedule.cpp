#include "planner/plan_schedule.h"

#include <algorithm>
#include <numeric>

#include "core/cost_model.h"
#include "core/errors.h"
#include "planner/infcl_model.h"
#include "planner/l2l_model.h"
#include "planner/micro_batch_model.h"
#include "planner/optimizer_estimate.h"

namespace headroom::planner {

namespace {

// An L2L plan: a model the relay can run, as one worker, with standard layers and nothing checkpointed.
void check_l2l_choice(const core::Plan& plan, const core::Trace& trace, const std::string& source) {
  const core::StepChoice& choice = plan.choice;
  if (const std::string why = l2l_refusal(trace); !why.empty()) {
    throw core::InputError(source + ": $.l2l: the relay cannot run " + trace.model.name + ": " + why);
  }
  if (choice.world_size > 1) throw core::InputError(source + ": $.l2l: L2L with data parallel (world_size > 1) is not implemented");
  if (!choice.checkpointed_blocks.empty()) {
    throw core::InputError(source + ": $.l2l: the relay recomputes every block already; give no checkpointed_blocks");
  }
  for (const auto& layer : choice.layers) {
    if (layer.variant != core::LayerVariant::Standard) {
      throw core::InputError(source + ": $.layers[" + std::to_string(layer.id) + "].variant: the relay runs standard layers only");
    }
  }
  if (!choice.l2l->whole_model() && first_relayed_stage(l2l_stages(trace), trace, choice.l2l->from_block) < 0) {
    std::string blocks;
    for (const auto& stage : l2l_stages(trace)) {
      const int block = trace.layers[static_cast<std::size_t>(stage.first)].block;
      if (block >= 0) blocks += (blocks.empty() ? "" : ", ") + std::to_string(block);
    }
    throw core::InputError(source + ": $.l2l.from_block: " + trace.model.name + " has no block " +
                           std::to_string(choice.l2l->from_block) + " (its blocks: " + (blocks.empty() ? "none" : blocks) + ")");
  }
  if (choice.micro_batches.size() > kMaxL2LMicroBatches) {
    throw core::InputError(source + ": $.micro_batches: an L2L step takes at most " + std::to_string(kMaxL2LMicroBatches) +
                           " micro-batches, got " + std::to_string(choice.micro_batches.size()));
  }
}

}  // namespace

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
  for (const int id : choice.checkpointed_blocks) {
    const BlockSpan* span = graph.block_with_id(id);
    if (span == nullptr) throw core::InputError(source + ": $.checkpointed_blocks: the trace has no block " + std::to_string(id));
    if (!span->checkpointable) {
      throw core::InputError(source + ": block " + std::to_string(id) + " cannot be checkpointed: " + span->why_not);
    }
  }
  for (const auto& layer : choice.layers) {
    if (layer.variant == core::LayerVariant::Tempo && !graph.can_be_lean(layer.id)) {
      throw core::InputError(source + ": $.layers[" + std::to_string(layer.id) + "].variant: layer " + layer.name +
                             " has no lean variant the trace measured");
    }
  }
  if (choice.world_size > 1) {
    // The plan's predictions are worker 0's: no other worker may carry more.
    const auto largest = [](const std::vector<std::int64_t>& sizes) {
      return sizes.empty() ? std::int64_t{0} : *std::max_element(sizes.begin(), sizes.end());
    };
    const auto first = choice.worker_micro_batches(0);
    const std::int64_t first_samples = std::accumulate(first.begin(), first.end(), std::int64_t{0});
    for (int r = 1; r < choice.world_size; ++r) {
      const auto sizes = choice.worker_micro_batches(r);
      if (std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0}) > first_samples || largest(sizes) > largest(first)) {
        throw core::InputError(source + ": $.data_parallel.micro_batches_per_worker: worker " + std::to_string(r) +
                               " carries more than worker 0, whose step the plan predicts (put the larger shares first)");
      }
    }
  }
  if (choice.l2l) check_l2l_choice(plan, trace, source);
  if (choice.loss_tiles && !trace.contrastive_loss) {
    throw core::InputError(source + ": $.loss_tiles: the trace's model has no contrastive loss to tile");
  }
  if (choice.loss_tiles) {
    const ContrastiveLossModel loss(*trace.contrastive_loss);
    if (!loss.measured(*choice.loss_tiles)) {
      std::string measured;
      for (const auto& t : loss.tiles()) measured += (measured.empty() ? "" : ", ") + std::to_string(t.rows) + "x" + std::to_string(t.cols);
      throw core::InputError(source + ": $.loss_tiles: the trace measured no " + std::to_string(choice.loss_tiles->rows) +
                             "x" + std::to_string(choice.loss_tiles->cols) + " tile (measured: " + measured + ")");
    }
  }
}

core::Schedule plan_schedule(const core::Trace& trace, const core::Plan& plan, const std::string& source) {
  const core::Trace planned = plan.optimizer.empty() ? trace : with_estimated_optimizer(trace, plan.optimizer);
  const core::CostModel costs(planned);
  const LayerGraph graph(planned);
  check_choice(plan, planned, source);
  return build_schedule(costs, graph, plan.choice);
}

}  // namespace headroom::planner
