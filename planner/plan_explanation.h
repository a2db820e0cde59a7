#pragma once
// The prose a plan carries: why it is what it is (memory or speed), why nothing fits, and how the
// plans it beat compare. Built from plain numbers the search found, so it is tested on its own.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/trace.h"

namespace headroom::planner {

// A step's micro-batches as the explanation speaks of them: how many, and the sizes of the first
// (the largest) and the last (the smallest); a step of many has hundreds of thousands.
struct MicroBatchSizes {
  std::int64_t count = 0;
  std::int64_t largest = 0;
  std::int64_t smallest = 0;
  static MicroBatchSizes of(const std::vector<std::int64_t>& sizes);
};

// One way of running the step the search weighed, as the explanation speaks of it.
struct WeighedStep {
  MicroBatchSizes micro_batches;
  int checkpointed_blocks = 0;
  int tempo_layers = 0;
  core::PlanPrediction predicted;
  std::optional<core::L2LChoice> l2l;  // run as L2L
};

// "2 micro-batches of 16, 1 checkpointed block, 3 Tempo layers" ("..., L2L with boundaries on the host")
std::string describe(const WeighedStep& step);

struct ChoiceFacts {
  std::int64_t limit_bytes = 0;   // the budget less the margin
  std::int64_t margin_bytes = 0;
  WeighedStep chosen;
  // The whole batch as one step with nothing applied, fitting or not.
  WeighedStep whole_batch;
  // The fastest way to fit with the fewest micro-batches (the largest micro-batch that fits).
  WeighedStep largest_fitting;
  // The chosen micro-batches' peak without checkpointing (its Tempo layers kept): set when it
  // checkpoints.
  std::optional<std::int64_t> peak_without_checkpointing;
  // The chosen micro-batches' peak without Tempo layers (its checkpointing kept): set when it has some.
  std::optional<std::int64_t> peak_without_tempo;
  // timing_resolution(trace), and the fastest split where it and the chosen one are a tie to it.
  double timing_resolution = 0;
  std::optional<WeighedStep> faster_on_a_tie;
  int tempo_candidates = 0;        // layers of the trace with a Tempo variant
  int tempo_measured_faster = 0;   // of the chosen Tempo layers, those measured no slower than standard
};

// Whether memory or speed decided the plan, naming the alternative it beat and by how much:
// "none: …" (the whole batch as it is), "speed: …" (the whole batch fits, the plan is faster) or
// "memory: …" (the whole batch does not fit; then what memory forced and what speed chose).
std::string binding_constraint(const ChoiceFacts& facts);

// Why nothing fits: the budget, the static floor when the limit is below it (with the device
// libraries' workspace where the floor holds one), the least peak the allowed strategies reach and
// the budget that would hold it.
std::string infeasible_reason(std::int64_t budget_bytes, std::int64_t limit_bytes, std::int64_t floor_bytes,
                              const std::string& strategies, std::int64_t least_peak, std::int64_t smallest_budget,
                              bool floor_has_workspace = false);

// The plans that lost, fastest first, at most `count`, each with its verdict against the chosen one:
// slower, or faster by less than `timing_resolution` (a tie, broken for the chosen one's fewer
// checkpointed blocks or Tempo layers, or its larger or fewer micro-batches).
std::vector<core::RunnerUp> runner_ups(const std::vector<WeighedStep>& losers, const WeighedStep& chosen,
                                       std::size_t count, double timing_resolution = 0);

struct L2LPrediction;  // planner/l2l_model.h
// What an L2L plan does with memory, for its warnings: what lives on the host and what the device
// holds, and that its time leaves out the copies.
std::string l2l_note(const L2LPrediction& prediction, const core::L2LChoice& l2l);

struct L2LCapacity;  // planner/l2l_model.h
// One line on the largest model L2L trains at `micro_batches` (boundaries on the device or host):
// its parameter count, how it was estimated and what bounds it.
std::string l2l_capacity_line(const L2LCapacity& capacity, bool boundaries_on_host,
                              const std::vector<std::int64_t>& micro_batches, std::int64_t host_memory_bytes);

// What a user must know about a plan of these micro-batches: times extrapolated past the profiled
// sizes, BatchNorm normalizing over micro-batches rather than the global batch.
std::vector<std::string> plan_warnings(const core::Trace& trace, const MicroBatchSizes& micro_batches, std::int64_t global_batch);

}  // namespace headroom::planner
