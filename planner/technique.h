#pragma once
// The planner's side of a technique: whether a step choice uses it, how a plan's choice is checked
// against its trace for it, what it says about the chosen step, and, for a technique that runs the
// whole step its own way (L2L), the step's prediction and schedule. Each technique
// implements it in its own file; check_choice, the plan's strategies and warnings, predict_step and
// build_schedule walk the registered techniques instead of branching on the choice's fields.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/plan.h"
#include "core/schedule.h"
#include "core/step_choice.h"
#include "core/trace.h"
#include "planner/layer_graph.h"
#include "planner/search_space.h"
#include "planner/step_sequence.h"
#include "planner/strategy_table.h"

namespace headroom::planner {

struct PlanRequest;  // planner/plan_search.h

// A plan's choice under check: a technique throws core::InputError prefixed with `source` ("plan.json")
// for what the trace cannot run.
struct CheckedChoice {
  const core::Trace& trace;
  const LayerGraph& graph;
  const core::StepChoice& choice;
  const std::string& source;
};

// The step a plan is made of: its choice as the plan lists it (every layer, every worker's micro-batches).
struct ChosenStep {
  const core::Trace& trace;
  const core::CostModel& costs;
  const LayerGraph& graph;
  const PlanRequest& request;
  const core::StepChoice& choice;
};

// One line of a plan's summary (report::render_plan_summary): "checkpointed     2 blocks: 1 3".
struct SummaryLine {
  std::string label;
  std::string text;  // continuation lines, if any, indented to the text's column
};

class Technique {
 public:
  virtual ~Technique() = default;
  // Its entry in the strategy table (--strategies, a plan's "strategies"); none for one the request
  // asks for otherwise (data parallel: its workers).
  virtual std::optional<Strategy> strategy() const { return std::nullopt; }
  // Whether `choice` applies it (as a plan lists it: worker 0's micro-batches are the ones that count).
  virtual bool used_by(const core::StepChoice& choice) const = 0;
  // What it opens to the search for `request` (search_space.h): its flags, options and the fields
  // every choice starts from. Throws core::InputError for a request it cannot plan.
  virtual void open(SearchSpace&, const core::Trace&, const LayerGraph&, const PlanRequest&) const {}
  // Throws core::InputError where the choice asks of it what the trace cannot run.
  virtual void check(const CheckedChoice&) const {}
  // The plan's warnings it adds for the chosen step.
  virtual void explain(const ChosenStep&, std::vector<std::string>& /*warnings*/) const {}
  // Its lines in a plan's summary, after the micro-batches'; one a summary always lists says "none"
  // where the choice does not use it.
  virtual void summarize(const core::StepChoice&, std::vector<SummaryLine>& /*lines*/) const {}
  // What `headroom plan` prints after the plan's summary where the plan uses it or the request named
  // it (`named`: in --strategies, not through "all"): L2L, the largest model the budget trains with
  // L2L.
  virtual std::string after_summary(const core::Trace&, const core::Plan&, const PlanRequest&, bool /*named*/) const {
    return {};
  }
  // The figures of its part of the chosen step that execute's report sets beside what it measures
  // (core::Plan::predicted_parts), under the names its core header gives them.
  virtual void predict_parts(const ChosenStep&, std::map<std::string, double>& /*parts*/) const {}
  // What it adds to the micro-batch sequence where the last micro-batch's ops (`last_ops`) end: the
  // time the optimizer then waits for it (data parallel: the all-reduce the last backward does not
  // hide) and its tasks in the schedule, after the tasks that complete what they carry (`task_of_op`:
  // the last micro-batch's task per op); it returns the task the optimizer waits for, or -1.
  virtual std::int64_t after_last_micro_batch_ns(const core::CostModel&, const std::vector<Op>& /*last_ops*/,
                                                 const core::StepChoice&) const {
    return 0;
  }
  virtual int append_after_last_micro_batch(const core::CostModel&, const std::vector<Op>& /*last_ops*/,
                                            const core::StepChoice&, const std::vector<int>& /*task_of_op*/,
                                            core::Schedule&) const {
    return -1;
  }
  // Whether it runs `choice`'s whole step its own way rather than as the micro-batch sequence
  // (step_sequence.h); one that does predicts and schedules it.
  virtual bool runs_the_step(const core::StepChoice&) const { return false; }
  virtual StepPrediction predict(const core::CostModel&, const LayerGraph&, const core::StepChoice&) const { return {}; }
  virtual core::Schedule schedule(const core::CostModel&, const LayerGraph&, const core::StepChoice&) const { return {}; }
};

// Each technique, implemented in its own file.
const Technique& micro_batching_technique();  // step_sequence.cpp
const Technique& checkpointing_technique();   // checkpointing.cpp
const Technique& tempo_technique();           // tempo.cpp
const Technique& infcl_technique();           // infcl_model.cpp
const Technique& l2l_technique();             // l2l_model.cpp
const Technique& data_parallel_technique();   // data_parallel_model.cpp
const Technique& ring_loss_technique();       // ring_infcl_model.cpp

// Every technique: the strategy table's, in its order, then those asked for otherwise.
std::span<const Technique* const> techniques();

// Every used technique's predicted parts of the chosen step (core::Plan::predicted_parts).
std::map<std::string, double> predicted_parts(const ChosenStep& step);

// The technique that runs `choice`'s whole step its own way, or null: the micro-batch sequence does.
const Technique* step_runner(const core::StepChoice& choice);

}  // namespace headroom::planner
