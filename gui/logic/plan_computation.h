#pragma once
// One re-plan, as the GUI asks for it: the plan (or why none fits), the memory timeline of its
// step and the throughput of every micro-batch size. Plain values, computed off the GUI thread and
// handed to the models and charts; no Qt here.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/schedule.h"
#include "gui/logic/trace_document.h"
#include "planner/plan_search.h"
#include "simulator/simulator.h"

namespace headroom::gui {

struct PlanInputs {
  std::int64_t budget_bytes = 0;
  std::int64_t global_batch = 0;
  // What `headroom plan` applies by default ("all"); Tempo only where the trace measured it, L2L
  // only where no plan without it fits.
  std::set<planner::Strategy> strategies = planner::all_strategies();
  std::string optimizer;  // empty: the trace's
  double margin_fraction = 0.05;
  // Data-parallel workers sharing the global batch, and their link (the trace's measured one unless
  // typed).
  int workers = 1;
  core::CollectiveLink link;
  bool operator==(const PlanInputs&) const = default;
};

// The request `headroom plan` would make for these inputs.
planner::PlanRequest plan_request(const TraceDocument& trace, const PlanInputs& inputs);

// What the device is doing over a stretch of the step, so a point on the memory chart can say what
// it belongs to ("backward of encoder.3.ffn (micro-batch 2 of 4)"). The words are put together
// only when a tooltip asks (MemoryTimeline::describe): a step has thousands of tasks.
struct TaskSpan {
  double start_ms = 0;
  double end_ms = 0;
  int layer = -1;        // -1: not a layer's (the optimizer step)
  int micro_batch = -1;  // -1: not a micro-batch's
  std::size_t category = 0;  // index into MemoryTimeline::categories
};

// A run of identical micro-batches: the tasks of its first one (tasks[first_task, first_task +
// task_count) of MemoryTimeline) recur every period_ms until end_ms, each time the next micro-batch.
struct RepeatSpan {
  double start_ms = 0;
  double period_ms = 0;
  double end_ms = 0;
  std::int64_t times = 1;
  std::size_t first_task = 0;
  std::size_t task_count = 0;
  std::int64_t low_bytes = 0;   // the level each repetition starts and ends at
  std::int64_t peak_bytes = 0;  // the highest each reaches
  // Too narrow to see one by one (many to a bin): the chart draws repetitions 2..times as a band
  // from low_bytes to peak_bytes instead of a block at the peak.
  bool banded = false;
};

// Memory over the step, stacked by kind, at most a few thousand points (the highest sample of each
// time bin is kept, so the peak is never smoothed away). Values are drawn as steps. A run of
// identical micro-batches is binned from its first one's samples, shifted, without listing the
// others: the points are those of every micro-batch listed out, and their number stays within the
// bins however many micro-batches the step has (where several fit in a bin, the bin holds their
// common peak: a band at the peak over the run).
struct MemoryTimeline {
  std::vector<double> time_ms;
  std::vector<std::array<std::int64_t, core::kMemoryKinds>> bytes;  // per point, by core::MemoryKind
  std::int64_t peak_bytes = 0;
  double peak_time_ms = 0;
  double step_ms = 0;
  std::vector<TaskSpan> tasks;  // compute-stream tasks in time order; a repeat's first repetition only
  std::vector<RepeatSpan> repeats;
  std::vector<std::string> categories;   // "forward", "backward", "optimizer", ...
  std::vector<std::string> layer_names;  // the trace's, by layer id
  std::size_t micro_batches = 0;
  std::string describe(const TaskSpan& task) const;
};

// The memory chart's tooltip at `time_ms`: the time, the task running then and the bytes of each
// kind held; empty outside the step.
std::string memory_hover_text(const MemoryTimeline& timeline, double time_ms);

struct ThroughputPoint {
  std::int64_t micro_batch = 0;  // the largest micro-batch of the split
  std::int64_t count = 0;        // how many micro-batches
  double samples_per_second = 0;
  std::int64_t peak_bytes = 0;
  bool fits = false;
  int checkpointed_blocks = 0;
  int tempo_layers = 0;
  double step_seconds = 0;
};

// The throughput chart's tooltip for one candidate split.
std::string throughput_hover_text(const ThroughputPoint& point);

struct ThroughputCurve {
  std::vector<ThroughputPoint> points;  // ascending micro-batch size
  int chosen = -1;                      // index of the plan's split
};

// What the planner may fill: the budget less its margin.
std::int64_t allowed_bytes(std::int64_t budget_bytes, double margin_fraction);

struct PlanResult {
  PlanInputs inputs;
  std::optional<core::Plan> plan;
  std::string infeasible_reason;
  std::int64_t smallest_budget = 0;
  // When nothing fits, the plan the planner would choose at smallest_budget: `timeline` is its
  // step, so the chart shows how far over the budget the best attempt is instead of nothing.
  std::optional<core::Plan> best_attempt;
  // Parameters, gradients and optimizer state: no plan needs less, unless L2L keeps them on
  // the host (0 where L2L may: its least is the best attempt's step).
  std::int64_t floor_bytes = 0;
  std::string error;  // a bad request (batch 0, ...): the message
  MemoryTimeline timeline;  // of `plan`, else of `best_attempt`
  ThroughputCurve throughput;
  std::string summary;  // what `headroom plan` prints
  double compute_ms = 0;
};

PlanResult compute_plan(const TraceDocument& trace, const PlanInputs& inputs);

// A plan as it leaves the app (saved, or written for `headroom execute`): with its time by class of
// work (planner::add_time_by_class), which compute_plan leaves out of the replans as the budget moves;
// left out too where `plan` is not of `trace` as it now is (a replan not yet caught up).
core::Plan plan_as_written(const TraceDocument& trace, core::Plan plan);

// Simulates the plan's step and keeps at most `max_bins` bins of it.
MemoryTimeline memory_timeline(const core::Trace& trace, const core::Plan& plan, int max_bins = 800);
// The same from a simulated schedule (`layer_names` by layer id, the step's `micro_batches`).
MemoryTimeline memory_timeline(const core::Schedule& schedule, const simulator::Simulation& sim,
                               std::vector<std::string> layer_names, std::size_t micro_batches, int max_bins = 800);

ThroughputCurve throughput_curve(const planner::PlanOutcome& outcome);

}  // namespace headroom::gui
