#pragma once
// The search for the fastest plan that fits: every micro-batch split of the global batch, and for
// each the least-recompute checkpointing that fits (checkpoint_dp), checked against the exact model.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/plan.h"
#include "core/trace.h"
#include "planner/checkpoint_dp.h"
#include "planner/layer_graph.h"
#include "planner/strategy_table.h"

namespace headroom::planner {

class BatchCostsCache;  // planner/step_sequence.h

// The largest global batch plan_step takes (what a plan file holds).
inline constexpr std::int64_t kMaxGlobalBatch = core::kMaxPlanBatch;

struct PlanRequest {
  std::int64_t budget_bytes = 0;
  std::int64_t global_batch = 0;
  double margin_fraction = 0.05;  // the plan's peak stays at or below budget * (1 - margin)
  // Tempo is used only where the trace measured Tempo variants (see PlanOutcome and the plan's warnings).
  std::set<Strategy> strategies{Strategy::MicroBatching, Strategy::Checkpointing};
  std::string trace_path;    // recorded in the plan
  std::string trace_sha256;  // recorded in the plan
  // The optimizer to plan for: empty or the trace's own for its measured state; the other one the
  // profiler knows for an estimate of its state (the plan records it and warns).
  std::string optimizer;
  // Data parallel (planner/data_parallel_model.h): the global batch is shared by this many workers,
  // each planned under the budget; their gradients are all-reduced over `link` in buckets of at
  // least bucket_cap_bytes.
  int workers = 1;
  core::CollectiveLink link;
  std::int64_t bucket_cap_bytes = core::kDefaultBucketCapBytes;
  // ZeRO's stage (core/sharding.h) the workers run; unset: each the model can run is weighed and the
  // fastest that fits is chosen (the lower stage on a tie).
  std::optional<int> shard_stage;
  // Stage 3: what a worker gathers at a time; unset: both weighed, the faster that fits chosen
  // (per block on a tie).
  std::optional<core::GatherUnit> gather;
  // L2L (with Strategy::L2L): the host memory its parameters, gradients and optimizer state (and
  // stashed boundaries) may fill; 0: not checked.
  std::int64_t host_memory_bytes = 0;
  // Weigh every split, as the search does up to two dozen splits, where past that it weighs only
  // those that may be chosen, named or charted (the same plan; tests compare the two).
  bool weigh_every_split = false;
};

// How far a micro-batch of `size` may be off in the trace's timings: the larger
// StepSequence::micro_batch_error of the profiled sizes it is read between (the last two past the
// largest; both kinds of step where the trace has Tempo steps). 0 where none was recorded.
double micro_batch_error_at(const core::Trace& trace, std::int64_t size);
// How far apart two plans' predicted speeds must be for the trace's timings to order them, from the
// errors of the times each is predicted from: twice the standard error of their difference,
// 2·√(a² + b²). Plans closer than that are a tie to the trace, and the search takes the one that
// does the least work (the fewest checkpointed blocks run again, then Tempo layers), then the one
// with the largest micro-batches (the nearest to training on the whole batch), then the fewest.
// Where no errors were recorded (older traces) it is 0: the fastest is taken.
double timing_resolution(double error_a, double error_b);
// The widest resolution of any two plans of the trace (from its largest micro_batch_error).
double timing_resolution(const core::Trace& trace);

// One split of the global batch the search weighed: its fastest checkpointing that fits or, when
// none does, its prediction without checkpointing.
struct SplitOutcome {
  // split_batch(global batch, count): `count` micro-batches as even as possible, the largest of
  // `micro_batch` (not listed: a split of a large batch has hundreds of thousands).
  std::int64_t micro_batch = 0;
  std::int64_t count = 0;
  bool fits = false;
  int checkpointed_blocks = 0;
  int tempo_layers = 0;
  core::PlanPrediction predicted;
};

struct PlanOutcome {
  std::optional<core::Plan> plan;       // empty when nothing fits
  // When nothing fits: the least budget that would, with these strategies; 0 when even that is
  // more than a plan may hold (core::kMaxPlanBudget).
  std::int64_t smallest_budget = 0;
  std::string reason;                   // when nothing fits: why, in one line
  // Fewest micro-batches first: one per distinct largest micro-batch up to two dozen of them (or
  // with weigh_every_split); past that, those the search weighed and one near each power of two.
  std::vector<SplitOutcome> splits;
  // With several workers and the stage left to the search: each stage weighed, lowest first.
  // Stage 3 weighed gathering per block and per layer: a row each (with the stage left to the
  // search, or stage 3 asked for without naming what it gathers).
  struct ShardStage {
    int stage = 0;
    std::optional<core::PlanPrediction> predicted;  // its fastest plan, where one fits
    std::int64_t static_bytes = 0;                  // what worker 0 holds throughout at that stage
    std::int64_t smallest_budget = 0;               // where none fits: the least budget that would
    std::optional<core::GatherUnit> gather;         // stage 3's
  };
  std::vector<ShardStage> shard_stages;
};
// "stage 3 (optimizer state, gradients and parameters sharded), per block".
std::string shard_row_name(const PlanOutcome::ShardStage& row);

// Throws InputError naming the request's field for a bad request (global_batch 0 or past
// kMaxGlobalBatch, budget_bytes 0, margin_fraction outside [0, 0.5], workers outside [1, 4096] or
// more than the global batch, workers above 1 without a link, a shard stage without several workers
// or one the trace cannot run). With several workers the search
// weighs worker 0's share (the largest): its splits are worker 0's micro-batches, their samples/s the
// whole global batch's.
PlanOutcome plan_step(const core::Trace& trace, const PlanRequest& request);

// Throws InputError ("shard_stage: ...") where the request's shard stage is none, needs workers it
// does not have, or cannot combine with the trace or a strategy asked for (which, and why).
void check_shard_stage(const core::Trace& trace, const PlanRequest& request);

// Micro-batch sizes for `count` micro-batches of `global_batch`, as even as possible, larger first.
std::vector<std::int64_t> split_batch(std::int64_t global_batch, std::int64_t count);

// The checkpointing problem of one micro-batch size as a chain of blocks (absolute bytes:
// static state, the micro-batch's input and the layers before the first block are the base).
// `variants` gives the layer variants (its micro-batches and checkpointed blocks are not read);
// `cache`, when given and made from `costs`, supplies the batch costs.
Chain checkpoint_chain(const core::CostModel& costs, const LayerGraph& graph, std::int64_t batch,
                       const core::StepChoice& variants = {}, BatchCostsCache* cache = nullptr);

}  // namespace headroom::planner
