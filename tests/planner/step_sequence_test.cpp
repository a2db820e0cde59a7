#include <gtest/gtest.h>

#include "core/cost_model.h"
#include "planner/layer_graph.h"
#include "planner/step_sequence.h"
#include "simulator/simulator.h"
#include "support/expand_repeats.h"
#include "support/plan_requests.h"

namespace headroom {
namespace {

using testing::committed;

// One sequence makes both the prediction and the schedule: runs of one micro-batch size share
// their ops, the last micro-batch keeps its input through the optimizer step, and the schedule has
// one task per layer op of every segment, a run of one size repeated.
TEST(StepSequence, PredictionAndScheduleShareIt) {
  const core::Trace trace = committed("cpu-bert.json");
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  auto choice = core::StepChoice{}.with_micro_batches({3, 3, 3, 2, 2});
  choice.checkpointed_blocks = {graph.blocks().front().block};
  const auto seq = planner::step_sequence(costs, graph, choice);
  ASSERT_EQ(seq.segments.size(), 4u);  // 3 x3, 1 x2, the last 2, the optimizer
  EXPECT_EQ(seq.segments[0].repeat, 3);
  EXPECT_EQ(seq.segments[1].repeat, 1);
  EXPECT_EQ(seq.segments[1].ops, seq.segments[2].ops);
  EXPECT_TRUE(seq.segments[2].keeps_input);
  EXPECT_EQ(seq.segments[2].first, 4);
  EXPECT_EQ(seq.segments[3].batch, 0);
  EXPECT_EQ(seq.ops.size(), 3u);  // two sizes and the optimizer

  const auto schedule = planner::build_schedule(costs, graph, choice);
  std::int64_t layer_ops = 0, segment_layer_ops = 0;
  for (const auto& segment : seq.segments) {
    for (const auto& op : seq.ops[segment.ops]) {
      layer_ops += segment.repeat * (op.layer >= 0);
      segment_layer_ops += op.layer >= 0;
    }
  }
  EXPECT_EQ(simulator::tasks_run(schedule), layer_ops + 1);
  EXPECT_EQ(static_cast<std::int64_t>(schedule.tasks.size()), segment_layer_ops + 1);
  const int per_micro_batch = static_cast<int>(segment_layer_ops / 3);
  EXPECT_EQ(schedule.repeats, std::vector<core::Repeat>{(core::Repeat{0, per_micro_batch, 3})});
  EXPECT_EQ(schedule.samples, 13);
  const auto predicted = planner::predict_step(costs, graph, choice);
  const auto sim = simulator::simulate(schedule);
  EXPECT_EQ(sim.peak_bytes, predicted.peak_bytes);
  EXPECT_EQ(sim.makespan_ns, predicted.step_ns);
  EXPECT_EQ(sim.memory.back().total(), costs.static_bytes());
}

// n identical micro-batches cost what one does: the schedule is one micro-batch's tasks with a
// repeat count, and the simulated step peaks as one micro-batch does and takes n times its time
// plus the optimizer's, exactly, as the planner predicts.
TEST(StepSequence, IdenticalMicroBatchesAreOneRepeatedSegment) {
  const core::Trace trace = committed("cpu-bert.json");
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  auto choice = graph.all_tempo();
  choice.checkpointed_blocks = {graph.blocks().front().block};
  const auto schedule_of = [&](std::size_t n) {
    return planner::build_schedule(costs, graph, choice.with_micro_batches(std::vector<std::int64_t>(n, 5)));
  };
  const auto one = schedule_of(1), three = schedule_of(3), many = schedule_of(20'000);
  EXPECT_EQ(many.tasks.size(), three.tasks.size());
  EXPECT_LE(many.tasks.size(), 2 * one.tasks.size());
  ASSERT_EQ(many.repeats.size(), 1u);
  EXPECT_EQ(many.repeats[0].times, 19'999);  // the last micro-batch keeps its input: a segment of its own
  const auto sim_one = simulator::simulate(one), sim_many = simulator::simulate(many);
  EXPECT_EQ(sim_many.memory.size(), simulator::simulate(three).memory.size());
  EXPECT_EQ(sim_many.peak_bytes, sim_one.peak_bytes);
  const std::int64_t optimizer_ns = one.tasks.back().duration_ns;
  EXPECT_EQ(sim_many.makespan_ns - optimizer_ns, 20'000 * (sim_one.makespan_ns - optimizer_ns));
  EXPECT_EQ(sim_many.repeats[0].period_ns, sim_one.makespan_ns - optimizer_ns);
  const auto predicted = planner::predict_step(costs, graph, choice.with_micro_batches(std::vector<std::int64_t>(20'000, 5)));
  EXPECT_EQ(sim_many.peak_bytes, predicted.peak_bytes);
  EXPECT_EQ(sim_many.makespan_ns, predicted.step_ns);
  EXPECT_EQ(sim_many.memory.back().total(), costs.static_bytes());
}

// Written out micro-batch by micro-batch, as schedules were before repeats, the step simulates the
// same: a split of two sizes, so two repeats.
TEST(StepSequence, RepeatedScheduleSimulatesAsTheWrittenOutOne) {
  const core::Trace trace = committed("cpu-gpt.json");
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  auto choice = core::StepChoice{}.with_micro_batches({4, 4, 4, 4, 3, 3, 3});
  const auto schedule = planner::build_schedule(costs, graph, choice);
  ASSERT_EQ(schedule.repeats.size(), 2u);
  const auto copies = testing::expand_repeats(schedule);
  EXPECT_EQ(static_cast<std::int64_t>(copies.tasks.size()), simulator::tasks_run(schedule));
  const auto repeated = simulator::simulate(schedule), written = simulator::simulate(copies);
  EXPECT_EQ(repeated.peak_bytes, written.peak_bytes);
  EXPECT_EQ(repeated.peak_time_ns, written.peak_time_ns);
  EXPECT_EQ(repeated.makespan_ns, written.makespan_ns);
  const auto& at_peak = schedule.tasks[static_cast<std::size_t>(repeated.peak_task)];
  const auto& written_at_peak = copies.tasks[static_cast<std::size_t>(written.peak_task)];
  EXPECT_EQ(at_peak.name, written_at_peak.name);
  EXPECT_EQ(at_peak.category, written_at_peak.category);
  EXPECT_EQ(at_peak.micro_batch, written_at_peak.micro_batch);
  EXPECT_EQ(repeated.memory.back().bytes, written.memory.back().bytes);
}

}  // namespace
}  // namespace headroom
