#include "gui/logic/trace_document.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/atomic_file.h"
#include "core/cost_model.h"
#include "core/json_reader.h"
#include "core/sha256.h"
#include "planner/l2l_model.h"
#include "planner/layer_graph.h"
#include "planner/optimizer_estimate.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"

namespace headroom::gui {

std::shared_ptr<const TraceDocument> load_trace_document(const std::string& path) {
  auto document = std::make_shared<TraceDocument>();
  document->path = path;
  // One read, so the digest is of exactly the text that was parsed (as `headroom plan` records it).
  const std::string text = core::read_file(path);
  document->sha256 = core::sha256_hex(text);
  document->trace = core::trace_from_json(core::parse_json(text, path), path);
  return document;
}

BudgetRange budget_range(const core::Trace& measured, std::int64_t global_batch, const std::string& optimizer) {
  const bool other_optimizer = !optimizer.empty() && optimizer != measured.optimizer.name;
  std::optional<core::Trace> estimated;
  if (other_optimizer) estimated = planner::with_estimated_optimizer(measured, optimizer);
  const core::Trace& trace = estimated ? *estimated : measured;
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  BudgetRange range;
  std::int64_t least = costs.static_bytes();
  if (planner::l2l_can_run(trace)) {
    // L2L keeps the training state on the host: its least is L2L at its finest split with the
    // boundaries on the host, as the planner's least budget counts it.
    const std::int64_t batch = std::max<std::int64_t>(global_batch, 1);
    const auto finest = planner::split_batch(batch, std::min<std::int64_t>(batch, planner::kMaxL2LMicroBatches));
    least = std::min(least, planner::predict_l2l_step(costs, graph, finest, core::L2LChoice{true}).device_peak_bytes);
  }
  range.least_bytes = std::max<std::int64_t>(least, 1 << 20);
  range.device_bytes = trace.device.total_memory_bytes;
  range.whole_batch_bytes =
      planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({std::max<std::int64_t>(global_batch, 1)})).peak_bytes;
  range.most_bytes = std::max({range.device_bytes, range.whole_batch_bytes * 2, range.least_bytes * 4});
  return range;
}

int budget_to_slider(std::int64_t bytes, const BudgetRange& range) {
  const double lo = std::log(static_cast<double>(range.least_bytes));
  const double hi = std::log(static_cast<double>(range.most_bytes));
  const double at = std::log(static_cast<double>(std::clamp(bytes, range.least_bytes, range.most_bytes)));
  return static_cast<int>(std::lround((at - lo) / (hi - lo) * kBudgetSliderSteps));
}

std::int64_t slider_to_budget(int position, const BudgetRange& range) {
  const double lo = std::log(static_cast<double>(range.least_bytes));
  const double hi = std::log(static_cast<double>(range.most_bytes));
  const double t = static_cast<double>(std::clamp(position, 0, kBudgetSliderSteps)) / kBudgetSliderSteps;
  // Whole MiB: budgets people would type.
  const auto bytes = static_cast<std::int64_t>(std::exp(lo + t * (hi - lo)));
  return std::max<std::int64_t>(1, bytes >> 20) << 20;
}

StartingInputs starting_inputs(const core::Trace& trace) {
  StartingInputs inputs;
  // Twice the largest profiled batch, but no more than the planner takes: a trace may be profiled
  // at up to kMaxTraceBatch, the same bound as kMaxGlobalBatch, and doubling it would ask for a plan
  // the planner refuses.
  inputs.global_batch = std::min(2 * (trace.batch_sizes.empty() ? 8 : trace.batch_sizes.back()), planner::kMaxGlobalBatch);
  planner::PlanRequest request;
  request.global_batch = inputs.global_batch;
  request.budget_bytes = 1;
  const std::int64_t least = planner::plan_step(trace, request).smallest_budget;
  const std::int64_t whole = budget_range(trace, inputs.global_batch).whole_batch_bytes;
  // As the demo does: well below what the whole batch needs, comfortably above the least any plan
  // needs, so the first plan already has to split or checkpoint. Rounded up to whole MiB.
  const std::int64_t budget = std::max(least, least + (whole - least) * 3 / 10);
  inputs.budget_bytes = ((budget + (1 << 20) - 1) >> 20) << 20;
  return inputs;
}

}  // namespace headroom::gui
