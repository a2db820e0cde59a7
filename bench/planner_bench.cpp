// Speed targets: plan bert large at B=1024 with all strategies in <= 100 ms; plan a
// synthetic 1000-layer chain in <= 2 s; simulate >= 5 million tasks/s; a step's schedule
// and simulation cost the same at 1 and at 20,000 identical micro-batches.
//   ./build/default/bench/planner_bench
#include <benchmark/benchmark.h>

#include "core/cost_model.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "simulator/simulator.h"
#include "support/build_paths.h"
#include "support/synthetic_chain.h"

namespace headroom {
namespace {

// A budget between the least the step can take with checkpointing and the least it takes with
// micro-batching alone, so the plan must checkpoint and the search must weigh both.
planner::PlanRequest checkpointing_request(const core::Trace& trace, std::int64_t batch) {
  planner::PlanRequest request;
  request.global_batch = batch;
  request.trace_path = "bench";
  request.trace_sha256 = std::string(64, '0');
  request.budget_bytes = 1;
  const std::int64_t least = planner::plan_step(trace, request).smallest_budget;
  request.strategies = {planner::Strategy::MicroBatching};
  const std::int64_t least_without = planner::plan_step(trace, request).smallest_budget;
  request.strategies = {planner::Strategy::MicroBatching, planner::Strategy::Checkpointing};
  request.budget_bytes = (least + least_without) / 2;
  return request;
}

// Times plan_step on one request and reports how many blocks the plan checkpoints.
void time_planning(benchmark::State& state, const core::Trace& trace, const planner::PlanRequest& request) {
  std::size_t checkpointed = 0;
  for (auto _ : state) {
    const auto outcome = planner::plan_step(trace, request);
    if (!outcome.plan) {
      state.SkipWithError("no plan");
      return;
    }
    checkpointed = outcome.plan->choice.checkpointed_blocks.size();
    benchmark::DoNotOptimize(outcome);
  }
  state.counters["layers"] = static_cast<double>(trace.layers.size());
  state.counters["checkpointed_blocks"] = static_cast<double>(checkpointed);
}

void BM_PlanBertLarge(benchmark::State& state) {
  const core::Trace trace = core::read_trace_file(std::string(HEADROOM_TRACES_DIR) + "/cpu-bert-large.json");
  time_planning(state, trace, checkpointing_request(trace, 1024));
}
BENCHMARK(BM_PlanBertLarge)->Unit(benchmark::kMillisecond);

void BM_PlanSyntheticChain1000(benchmark::State& state) {
  const core::Trace trace = testing::synthetic_chain(1000);
  time_planning(state, trace, checkpointing_request(trace, 64));
}
BENCHMARK(BM_PlanSyntheticChain1000)->Unit(benchmark::kMillisecond);

// A schedule of forward/backward tasks on the compute stream with copies on both copy streams.
core::Schedule synthetic_schedule(int tasks) {
  core::Schedule s;
  s.samples = 1;
  for (int i = 0; i < tasks; ++i) {
    core::Task t;
    t.name = "t";
    t.stream = i % 4 == 1 ? core::Stream::HostToDevice : i % 4 == 3 ? core::Stream::DeviceToHost : core::Stream::Compute;
    t.duration_ns = 100 + i % 7;
    if (i >= 2) t.dependencies = {i - 2};
    t.at_start = {{core::MemoryKind::Activation, 64}};
    t.transient_bytes = 32;
    t.at_end = {{core::MemoryKind::Activation, -64}};
    s.tasks.push_back(std::move(t));
  }
  return s;
}

void BM_SimulatorThroughput(benchmark::State& state) {
  const core::Schedule schedule = synthetic_schedule(static_cast<int>(state.range(0)));
  simulator::SimulationOptions options;
  options.record_memory = state.range(1) != 0;
  for (auto _ : state) benchmark::DoNotOptimize(simulator::simulate(schedule, options));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SimulatorThroughput)->Args({1'000'000, 0})->Args({1'000'000, 1})->ArgNames({"tasks", "memory_timeline"})
    ->Unit(benchmark::kMillisecond);

// build_schedule and simulate of bert's step at n micro-batches of 5: flat in n.
void BM_ScheduleAndSimulateMicroBatches(benchmark::State& state) {
  const core::Trace trace = core::read_trace_file(std::string(HEADROOM_TRACES_DIR) + "/cpu-bert.json");
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const auto choice = core::StepChoice{}.with_micro_batches(std::vector<std::int64_t>(static_cast<std::size_t>(state.range(0)), 5));
  std::size_t tasks = 0;
  for (auto _ : state) {
    const core::Schedule schedule = planner::build_schedule(costs, graph, choice);
    tasks = schedule.tasks.size();
    benchmark::DoNotOptimize(simulator::simulate(schedule));
  }
  state.counters["tasks_simulated"] = static_cast<double>(tasks);
}
BENCHMARK(BM_ScheduleAndSimulateMicroBatches)->Arg(1)->Arg(20'000)->ArgNames({"micro_batches"})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace headroom

BENCHMARK_MAIN();
