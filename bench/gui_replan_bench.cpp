// Re-plan latency of the desktop app (the target: well under 100 ms for the committed traces): one
// compute_plan, what the GUI's worker runs on every change of a control (plan search, the plan's
// simulated memory timeline, throughput of every micro-batch size, the summary), per committed
// trace at the inputs the app starts with and at a budget just above the least that fits; and at
// global batches of thousands of micro-batches (the target: re-plan time flat in the batch beyond
// the plan search, at most 50 ms each).
//   ./build/default/bench/gui_replan_bench
#include <benchmark/benchmark.h>

#include "core/plan.h"
#include "gui/logic/plan_computation.h"
#include "gui/logic/trace_document.h"
#include "support/build_paths.h"

namespace headroom::gui {
namespace {

void run_replan(benchmark::State& state, const TraceDocument& trace, const PlanInputs& inputs) {
  std::size_t micro_batches = 0;
  for (auto _ : state) {
    const PlanResult result = compute_plan(trace, inputs);
    if (!result.plan) {
      state.SkipWithError("no plan");
      return;
    }
    micro_batches = result.plan->choice.micro_batches.size();
    benchmark::DoNotOptimize(result);
  }
  state.counters["layers"] = static_cast<double>(trace.trace.layers.size());
  state.counters["batch"] = static_cast<double>(inputs.global_batch);
  state.counters["budget_MiB"] = static_cast<double>(inputs.budget_bytes >> 20);
  state.counters["micro_batches"] = static_cast<double>(micro_batches);
}

void replan(benchmark::State& state, const char* file, bool tight) {
  const auto trace = load_trace_document(std::string(HEADROOM_TRACES_DIR) + "/" + file);
  const StartingInputs start = starting_inputs(trace->trace);
  PlanInputs inputs;
  inputs.global_batch = start.global_batch;
  inputs.budget_bytes = start.budget_bytes;
  if (tight) {
    inputs.budget_bytes = 1;
    inputs.budget_bytes = compute_plan(*trace, inputs).smallest_budget + (1 << 20);
  }
  run_replan(state, *trace, inputs);
}

// A fixed budget and global batch, as typed into the window.
void replan_at(benchmark::State& state, const char* file, std::int64_t budget_bytes, std::int64_t global_batch) {
  const auto trace = load_trace_document(std::string(HEADROOM_TRACES_DIR) + "/" + file);
  PlanInputs inputs;
  inputs.global_batch = global_batch;
  inputs.budget_bytes = budget_bytes;
  run_replan(state, *trace, inputs);
}

// The plan search alone at the same inputs: what compute_plan adds to it (the simulated timeline,
// the throughput curve, the summary) should not grow with the global batch.
void search_at(benchmark::State& state, const char* file, std::int64_t budget_bytes, std::int64_t global_batch) {
  const auto trace = load_trace_document(std::string(HEADROOM_TRACES_DIR) + "/" + file);
  PlanInputs inputs;
  inputs.global_batch = global_batch;
  inputs.budget_bytes = budget_bytes;
  const planner::PlanRequest request = plan_request(*trace, inputs);
  for (auto _ : state) benchmark::DoNotOptimize(planner::plan_step(trace->trace, request));
}

#define HEADROOM_REPLAN(name, file)                                                                  \
  BENCHMARK_CAPTURE(replan, name##_start, file, false)->Unit(benchmark::kMillisecond);                \
  BENCHMARK_CAPTURE(replan, name##_tight, file, true)->Unit(benchmark::kMillisecond)

HEADROOM_REPLAN(mlp, "cpu-mlp.json");
HEADROOM_REPLAN(cnn, "cpu-cnn.json");
HEADROOM_REPLAN(bert, "cpu-bert.json");
HEADROOM_REPLAN(gpt, "cpu-gpt.json");
HEADROOM_REPLAN(bert_large, "cpu-bert-large.json");

// Many micro-batches (re-plan time flat in the batch up to the largest a plan takes): bert
// large at 7 GiB and bert at 241 MiB, each at batch 8 to 2^20 (core::kMaxPlanBatch).
constexpr std::int64_t kGiB = std::int64_t{1} << 30, kMiB = std::int64_t{1} << 20;
#define HEADROOM_REPLAN_AT(name, file, budget, batch)                                        \
  BENCHMARK_CAPTURE(replan_at, name, file, budget, batch)->Unit(benchmark::kMillisecond); \
  BENCHMARK_CAPTURE(search_at, name, file, budget, batch)->Unit(benchmark::kMillisecond)
HEADROOM_REPLAN_AT(bert_large_7GiB_b8, "cpu-bert-large.json", 7 * kGiB, 8);
HEADROOM_REPLAN_AT(bert_large_7GiB_b1024, "cpu-bert-large.json", 7 * kGiB, 1024);
HEADROOM_REPLAN_AT(bert_large_7GiB_b4096, "cpu-bert-large.json", 7 * kGiB, 4096);
HEADROOM_REPLAN_AT(bert_large_7GiB_b20000, "cpu-bert-large.json", 7 * kGiB, 20000);
HEADROOM_REPLAN_AT(bert_large_7GiB_b100000, "cpu-bert-large.json", 7 * kGiB, 100000);
HEADROOM_REPLAN_AT(bert_large_7GiB_b1048576, "cpu-bert-large.json", 7 * kGiB, core::kMaxPlanBatch);
HEADROOM_REPLAN_AT(bert_241MiB_b8, "cpu-bert.json", 241 * kMiB, 8);
HEADROOM_REPLAN_AT(bert_241MiB_b1024, "cpu-bert.json", 241 * kMiB, 1024);
HEADROOM_REPLAN_AT(bert_241MiB_b4096, "cpu-bert.json", 241 * kMiB, 4096);
HEADROOM_REPLAN_AT(bert_241MiB_b20000, "cpu-bert.json", 241 * kMiB, 20000);
HEADROOM_REPLAN_AT(bert_241MiB_b100000, "cpu-bert.json", 241 * kMiB, 100000);
HEADROOM_REPLAN_AT(bert_241MiB_b1048576, "cpu-bert.json", 241 * kMiB, core::kMaxPlanBatch);

}  // namespace
}  // namespace headroom::gui

BENCHMARK_MAIN();
