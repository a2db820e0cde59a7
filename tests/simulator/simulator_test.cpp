#include <gtest/gtest.h>

#include "core/cost_model.h"
#include "planner/layer_graph.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "simulator/simulator.h"
#include "support/expand_repeats.h"
#include "support/plan_requests.h"

namespace headroom {
namespace {

using core::MemoryKind;
using core::Stream;
using testing::budget_sweep;
using testing::committed;
using testing::kTraces;
using testing::request;

// Worked by hand:
//   t=0   A starts on compute (+100, transient 20) and B on host-to-device (+40): 1160
//   t=5   B ends; D (needs B) starts on device-to-host (+16): 1176, the peak
//   t=10  A ends (-20 transient, -30): 1126; C (needs A and B) starts (transient 10): 1136
//   t=13  D ends (-16): 1120
//   t=14  C ends (-10, -70, -40): 1000
TEST(Simulator, HandComputedTimelineWithOverlap) {
  core::Schedule s;
  s.resident = {{MemoryKind::Parameter, 1000}};
  s.samples = 7;
  s.tasks = {
      core::Task{.name = "A", .stream = Stream::Compute, .duration_ns = 10,
                 .at_start = {{MemoryKind::Activation, 100}}, .transient_bytes = 20,
                 .at_end = {{MemoryKind::Activation, -30}}},
      core::Task{.name = "B", .stream = Stream::HostToDevice, .duration_ns = 5, .at_start = {{MemoryKind::Input, 40}}},
      core::Task{.name = "C", .stream = Stream::Compute, .duration_ns = 4, .dependencies = {0, 1},
                 .transient_bytes = 10, .at_end = {{MemoryKind::Activation, -70}, {MemoryKind::Input, -40}}},
      core::Task{.name = "D", .stream = Stream::DeviceToHost, .duration_ns = 8, .dependencies = {1},
                 .at_start = {{MemoryKind::Activation, 16}}, .at_end = {{MemoryKind::Activation, -16}}},
  };
  const auto sim = simulator::simulate(s);
  EXPECT_EQ(sim.makespan_ns, 14);
  EXPECT_EQ(sim.peak_bytes, 1176);
  EXPECT_EQ(sim.peak_time_ns, 5);
  EXPECT_EQ(sim.peak_task, 3);
  const std::vector<std::pair<std::int64_t, std::int64_t>> expected{{0, 10}, {0, 5}, {10, 14}, {5, 13}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(sim.tasks[i].start_ns, expected[i].first) << s.tasks[i].name;
    EXPECT_EQ(sim.tasks[i].end_ns, expected[i].second) << s.tasks[i].name;
  }
  EXPECT_EQ(sim.memory.back().total(), 1000);
  EXPECT_EQ(sim.memory.back().bytes[static_cast<std::size_t>(MemoryKind::Parameter)], 1000);
  EXPECT_DOUBLE_EQ(sim.samples_per_second(), 7 * 1e9 / 14);
}

// L2L by hand: the device holds one layer's parameters (10 bytes each) at a time beside a
// resident 100; layer 2's copy overlaps layer 1's compute, gradients go back to the host, where the
// optimizer steps each layer as its gradients arrive.
//   t=0   p1 copies host-to-device (+10): 110
//   t=3   F1 computes (transient 5) while p2 copies (+10): 125, the peak
//   t=8   F1 ends and frees p1 (-10); g1 goes device-to-host (+4); F2 computes (transient 5): 124
//   t=10  g1 is on the host (-4); the host optimizer steps layer 1 (10..16)
//   t=13  F2 ends and frees p2; g2 goes to the host (13..15); the optimizer steps layer 2 (16..22)
TEST(Simulator, L2LOverlapsCopiesComputeAndTheHostOptimizer) {
  core::Schedule s;
  s.resident = {{MemoryKind::Activation, 100}};
  s.samples = 1;
  s.tasks = {
      core::Task{.name = "p1", .stream = Stream::HostToDevice, .duration_ns = 3, .at_start = {{MemoryKind::Parameter, 10}}},                     // 0
      core::Task{.name = "F1", .stream = Stream::Compute, .duration_ns = 5, .dependencies = {0}, .transient_bytes = 5, .at_end = {{MemoryKind::Parameter, -10}}},                        // 1
      core::Task{.name = "p2", .stream = Stream::HostToDevice, .duration_ns = 3, .dependencies = {0}, .at_start = {{MemoryKind::Parameter, 10}}},                    // 2
      core::Task{.name = "g1", .stream = Stream::DeviceToHost, .duration_ns = 2, .dependencies = {1}, .at_start = {{MemoryKind::Gradient, 4}}, .at_end = {{MemoryKind::Gradient, -4}}},  // 3
      core::Task{.name = "F2", .stream = Stream::Compute, .duration_ns = 5, .dependencies = {1, 2}, .transient_bytes = 5, .at_end = {{MemoryKind::Parameter, -10}}},                     // 4
      core::Task{.name = "O1", .stream = Stream::Host, .duration_ns = 6, .dependencies = {3}},                                                       // 5
      core::Task{.name = "g2", .stream = Stream::DeviceToHost, .duration_ns = 2, .dependencies = {4}, .at_start = {{MemoryKind::Gradient, 4}}, .at_end = {{MemoryKind::Gradient, -4}}},  // 6
      core::Task{.name = "O2", .stream = Stream::Host, .duration_ns = 6, .dependencies = {6}},                                                       // 7
  };
  const auto sim = simulator::simulate(s);
  const std::vector<std::pair<std::int64_t, std::int64_t>> expected{{0, 3}, {3, 8}, {3, 6}, {8, 10},
                                                                    {8, 13}, {10, 16}, {13, 15}, {16, 22}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(sim.tasks[i].start_ns, expected[i].first) << s.tasks[i].name;
    EXPECT_EQ(sim.tasks[i].end_ns, expected[i].second) << s.tasks[i].name;
  }
  EXPECT_EQ(sim.makespan_ns, 22);
  EXPECT_EQ(sim.peak_bytes, 125);
  EXPECT_EQ(sim.peak_time_ns, 3);
  EXPECT_EQ(sim.memory.back().total(), 100);
}

// Data parallel by hand: each layer's gradient all-reduce runs on the collective stream as soon as
// its backward is done, overlapping the next backward; the optimizer waits for every all-reduce.
//   B2 0..4 (grads +8 at end), AR2 4..10 (bucket +8 while it runs) beside B1 4..7 (+8 at end),
//   AR1 10..16, optimizer 16..18. Peak at t=7: 50 + 8 + 8 (AR2's bucket) + 8 = 74.
TEST(Simulator, DataParallelAllReduceOverlapsBackward) {
  core::Schedule s;
  s.resident = {{MemoryKind::Parameter, 50}};
  s.samples = 2;
  s.tasks = {
      core::Task{.name = "B2", .stream = Stream::Compute, .duration_ns = 4, .at_end = {{MemoryKind::Gradient, 8}}},          // 0
      core::Task{.name = "AR2", .stream = Stream::Collective, .duration_ns = 6, .dependencies = {0}, .transient_bytes = 8},                             // 1
      core::Task{.name = "B1", .stream = Stream::Compute, .duration_ns = 3, .dependencies = {0}, .at_end = {{MemoryKind::Gradient, 8}}},          // 2
      core::Task{.name = "AR1", .stream = Stream::Collective, .duration_ns = 6, .dependencies = {2}, .transient_bytes = 8},                             // 3
      core::Task{.name = "step", .stream = Stream::Compute, .duration_ns = 2, .dependencies = {1, 3}, .at_end = {{MemoryKind::Gradient, -16}}},  // 4
  };
  const auto sim = simulator::simulate(s);
  const std::vector<std::pair<std::int64_t, std::int64_t>> expected{{0, 4}, {4, 10}, {4, 7}, {10, 16}, {16, 18}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(sim.tasks[i].start_ns, expected[i].first) << s.tasks[i].name;
    EXPECT_EQ(sim.tasks[i].end_ns, expected[i].second) << s.tasks[i].name;
  }
  EXPECT_EQ(sim.makespan_ns, 18);
  EXPECT_EQ(sim.peak_bytes, 74);
  EXPECT_EQ(sim.memory.back().total(), 50);
  // Each stream is a lane of its own in the Chrome trace.
  const auto chrome = simulator::chrome_trace(s, sim, "dp").dump();
  EXPECT_NE(chrome.find("\"collective\""), std::string::npos);
}

TEST(Simulator, FreesAtAnInstantComeBeforeAllocations) {
  core::Schedule s;
  s.tasks = {
      core::Task{.name = "X", .stream = Stream::Compute, .duration_ns = 5, .at_start = {{MemoryKind::Activation, 50}},
                 .at_end = {{MemoryKind::Activation, -50}}},
      core::Task{.name = "Z", .stream = Stream::HostToDevice, .duration_ns = 5},
      core::Task{.name = "Y", .stream = Stream::HostToDevice, .duration_ns = 1,
                 .at_start = {{MemoryKind::Activation, 60}}, .at_end = {{MemoryKind::Activation, -60}}},
  };
  const auto sim = simulator::simulate(s);
  EXPECT_EQ(sim.tasks[2].start_ns, 5);
  EXPECT_EQ(sim.peak_bytes, 60);  // X's 50 is gone before Y's 60 arrives
}

// Found by fuzzing the planner: a micro-batch's last op that leaves bytes allocated (a positive
// retained change) peaks before the frees that end the micro-batch; the planner counted it and
// the simulator, applying a task's end changes at once, did not.
TEST(Simulator, PeakSeesEachEndChangeInOrder) {
  core::Schedule s;
  s.resident = {{MemoryKind::Parameter, 100}};
  s.tasks = {core::Task{.name = "last backward", .stream = Stream::Compute, .duration_ns = 3,
                        .at_start = {{MemoryKind::Input, 10}}, .transient_bytes = 5,
                        .at_end = {{MemoryKind::Activation, 40}, {MemoryKind::Activation, -40}, {MemoryKind::Input, -10}}}};
  const auto sim = simulator::simulate(s);
  EXPECT_EQ(sim.peak_bytes, 150);  // 100 + 10 input + 40 left by the op, before the frees
  EXPECT_EQ(sim.peak_time_ns, 3);
  EXPECT_EQ(sim.peak_task, 0);
  EXPECT_EQ(sim.memory.size(), 3u);  // one sample per event, as before
  EXPECT_EQ(sim.memory.back().total(), 100);
}

TEST(Simulator, StreamsRunInOrderAndWaitForDependencies) {
  core::Schedule s;
  s.tasks = {
      core::Task{.name = "copy", .stream = Stream::HostToDevice, .duration_ns = 7},
      core::Task{.name = "first", .stream = Stream::Compute, .duration_ns = 2, .dependencies = {0}},
      core::Task{.name = "second", .stream = Stream::Compute, .duration_ns = 3},  // behind "first" in its stream
  };
  const auto sim = simulator::simulate(s);
  EXPECT_EQ(sim.tasks[1].start_ns, 7);
  EXPECT_EQ(sim.tasks[2].start_ns, 9);
  EXPECT_EQ(sim.makespan_ns, 12);
}

TEST(Simulator, RejectsSchedulesThatCannotFinish) {
  core::Schedule s;
  s.tasks = {core::Task{.name = "waits", .stream = Stream::Compute, .duration_ns = 1, .dependencies = {1}},
             core::Task{.name = "behind", .stream = Stream::Compute, .duration_ns = 1}};
  EXPECT_THROW(simulator::simulate(s), std::invalid_argument);
  s.tasks = {core::Task{.name = "dangling", .stream = Stream::Compute, .duration_ns = 1, .dependencies = {5}}};
  EXPECT_THROW(simulator::simulate(s), std::invalid_argument);
}

TEST(Simulator, ChromeTraceHasLanesSpansAndMemory) {
  core::Schedule s;
  s.tasks = {core::Task{.name = "A", .stream = Stream::Compute, .duration_ns = 2000,
                        .at_start = {{MemoryKind::Activation, 8}}, .at_end = {{MemoryKind::Activation, -8}}}};
  const auto sim = simulator::simulate(s);
  const auto json = simulator::chrome_trace(s, sim, "t");
  int spans = 0, counters = 0;
  for (const auto& e : json["traceEvents"]) {
    spans += e["ph"] == "X";
    counters += e["ph"] == "C";
    if (e["ph"] == "X") {
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2.0);  // microseconds
    }
  }
  EXPECT_EQ(spans, 1);
  EXPECT_EQ(counters, 3);
}

// A micro-batch by hand, repeated: its input arrives with A (+10 input, +40 at A's start, transient
// 5), B frees what A left and the input (-40, -10). Each repetition takes 7 ns and peaks at
// 100 + 10 + 40 + 5 = 155 (during A); the optimizer's 3 ns follow, with a transient of 60: 160.
core::Task task(std::string name, std::int64_t duration_ns, Stream stream = Stream::Compute) {
  core::Task t;
  t.name = std::move(name);
  t.duration_ns = duration_ns;
  t.stream = stream;
  return t;
}

core::Schedule repeated_micro_batch(std::int64_t times) {
  core::Schedule s;
  s.resident = {{MemoryKind::Parameter, 100}};
  s.samples = times;
  s.tasks = {task("A", 4), task("B", 3), task("step", 3)};
  s.tasks[0].at_start = {{MemoryKind::Input, 10}, {MemoryKind::Activation, 40}};
  s.tasks[0].transient_bytes = 5;
  s.tasks[1].dependencies = {0};
  s.tasks[1].at_end = {{MemoryKind::Activation, -40}, {MemoryKind::Input, -10}};
  s.tasks[0].micro_batch = s.tasks[1].micro_batch = 0;
  s.tasks[2].dependencies = {1};
  s.tasks[2].transient_bytes = 60;
  s.repeats = {{0, 2, times}};
  return s;
}

// A repeat is simulated once and its other repetitions add time: the step of n micro-batches
// takes n times one's time plus the optimizer's, peaks as one does, and keeps the same number of
// timings and memory samples whatever n is.
TEST(Simulator, RepeatRunsOnceAndAddsItsRepetitionsAsTime) {
  const auto one = simulator::simulate(repeated_micro_batch(1));
  const auto many = simulator::simulate(repeated_micro_batch(20'000));
  EXPECT_EQ(one.makespan_ns, 7 + 3);
  EXPECT_EQ(many.makespan_ns, 20'000 * 7 + 3);
  EXPECT_EQ(one.peak_bytes, 160);
  EXPECT_EQ(many.peak_bytes, 160);
  EXPECT_EQ(many.peak_time_ns, 20'000 * 7);
  EXPECT_EQ(many.tasks.size(), 3u);
  EXPECT_EQ(many.memory.size(), one.memory.size());
  EXPECT_EQ(many.tasks[2].start_ns, 20'000 * 7);  // the optimizer after the last repetition
  ASSERT_EQ(many.repeats.size(), 1u);
  const simulator::RepeatTiming& r = many.repeats[0];
  EXPECT_EQ(r.start_ns, 0);
  EXPECT_EQ(r.period_ns, 7);
  EXPECT_EQ(r.end_ns, 20'000 * 7);
  EXPECT_EQ(r.times, 20'000);
  EXPECT_EQ(r.peak_bytes, 155);
  EXPECT_EQ(r.peak_task, 0);
  EXPECT_EQ(r.first_sample, 1u);  // after the resident state
  EXPECT_EQ(r.end_sample, 5u);    // A's start and end, B's start and end
  EXPECT_EQ(many.memory.back().total(), 100);
  EXPECT_EQ(simulator::tasks_run(repeated_micro_batch(20'000)), 2 * 20'000 + 1);
}

// Written out, the repetitions simulate to the same step: peak, its time and task, length, and the
// memory at every sample of the first repetition and after the last.
TEST(Simulator, RepeatSimulatesAsItsCopiesWould) {
  for (const std::int64_t times : {1, 2, 3, 50}) {
    const core::Schedule s = repeated_micro_batch(times);
    const core::Schedule copies = testing::expand_repeats(s);
    ASSERT_EQ(copies.tasks.size(), static_cast<std::size_t>(2 * times + 1));
    const auto repeated = simulator::simulate(s);
    const auto written = simulator::simulate(copies);
    EXPECT_EQ(repeated.makespan_ns, written.makespan_ns) << times;
    EXPECT_EQ(repeated.peak_bytes, written.peak_bytes) << times;
    EXPECT_EQ(repeated.peak_time_ns, written.peak_time_ns) << times;
    EXPECT_EQ(s.tasks[static_cast<std::size_t>(repeated.peak_task)].name,
              copies.tasks[static_cast<std::size_t>(written.peak_task)].name);
    for (std::size_t i = 0; i < repeated.repeats[0].end_sample; ++i) {
      EXPECT_EQ(repeated.memory[i].time_ns, written.memory[i].time_ns);
      EXPECT_EQ(repeated.memory[i].bytes, written.memory[i].bytes);
    }
    EXPECT_EQ(repeated.memory.back().bytes, written.memory.back().bytes);
  }
}

// A repeat runs alone: a copy on another stream that started before it ends before the repeat
// starts, and nothing after it overlaps its last repetition.
TEST(Simulator, RepeatWaitsForEverythingBeforeIt) {
  core::Schedule s;
  s.tasks = {task("copy", 10, Stream::HostToDevice), task("work", 2), task("late copy", 1, Stream::HostToDevice)};
  s.repeats = {{1, 1, 4}};
  const auto sim = simulator::simulate(s);
  EXPECT_EQ(sim.tasks[1].start_ns, 10);
  EXPECT_EQ(sim.repeats[0].end_ns, 18);
  EXPECT_EQ(sim.tasks[2].start_ns, 18);
  EXPECT_EQ(sim.makespan_ns, 19);
}

TEST(Simulator, RejectsRepeatsThatCannotRepeat) {
  core::Schedule s = repeated_micro_batch(3);
  s.tasks[1].at_end.pop_back();  // the input stays: each repetition would hold one more
  try {
    simulator::simulate(s);
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("repeated tasks 0 to 1 do not end at the memory they started from"), std::string::npos)
        << e.what();
  }
  for (const core::Repeat bad : {core::Repeat{0, 0, 2}, core::Repeat{2, 2, 2}, core::Repeat{0, 2, 0}, core::Repeat{-1, 2, 2}}) {
    s = repeated_micro_batch(3);
    s.repeats = {bad};
    EXPECT_THROW(simulator::simulate(s), std::invalid_argument) << bad.first_task << " " << bad.task_count << " " << bad.times;
  }
  s = repeated_micro_batch(3);
  s.repeats = {{0, 2, 2}, {1, 1, 2}};  // overlapping
  EXPECT_THROW(simulator::simulate(s), std::invalid_argument);
}

// The Chrome trace draws a repeat's first repetition and one span for the rest, whatever their
// number; over that span the memory counter holds a repetition's peak.
TEST(Simulator, ChromeTraceSummarisesRepetitions) {
  const auto events = [](std::int64_t times) {
    const core::Schedule s = repeated_micro_batch(times);
    return simulator::chrome_trace(s, simulator::simulate(s), "t")["traceEvents"];
  };
  const auto many = events(1'000'000);
  EXPECT_EQ(many.size(), events(2).size());
  EXPECT_EQ(events(1).size() + 3, many.size());  // the summary span and two counter samples
  int summaries = 0;
  for (const auto& e : many) {
    if (e["ph"] != "X" || e["cat"] != "repeat") continue;
    ++summaries;
    EXPECT_EQ(e["name"], "micro-batches 1..999999 (999999 like micro-batch 0)");
    EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 7 / 1000.0);
    EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 999'999 * 7 / 1000.0);
    EXPECT_EQ(e["args"]["repetitions"], 999'999);
    EXPECT_EQ(e["args"]["repetition_ns"], 7);
    EXPECT_EQ(e["args"]["peak_bytes"], 155);
    EXPECT_EQ(e["args"]["last_micro_batch"], 999'999);
  }
  EXPECT_EQ(summaries, 1);
  std::vector<std::pair<double, std::int64_t>> memory;
  for (const auto& e : many) {
    if (e["ph"] != "C") continue;
    std::int64_t total = 0;
    for (const auto& [kind, bytes] : e["args"].items()) total += bytes.get<std::int64_t>();
    memory.emplace_back(e["ts"].get<double>(), total);
  }
  // ..., the first repetition's end (100), the peak over the rest (155), their end (100), ...
  const auto summary = std::find(memory.begin(), memory.end(), std::pair<double, std::int64_t>{7 / 1000.0, 155});
  ASSERT_NE(summary, memory.end());
  EXPECT_EQ(*(summary - 1), (std::pair<double, std::int64_t>{7 / 1000.0, 100}));
  EXPECT_EQ(*(summary + 1), (std::pair<double, std::int64_t>{7'000'000 / 1000.0, 100}));
}

// The planner's numbers and the simulator's agree for the same plan.
TEST(Simulator, AgreesWithThePlanner) {
  for (const auto& name : kTraces) {
    SCOPED_TRACE(name);
    const core::Trace trace = committed(name);
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    for (const std::int64_t budget : budget_sweep(trace, 24, 8)) {
      const auto outcome = planner::plan_step(trace, request(budget, 24));
      if (!outcome.plan) continue;
      planner::check_choice(*outcome.plan, trace, name);
      const auto schedule = planner::build_schedule(costs, graph, outcome.plan->choice);
      const auto sim = simulator::simulate(schedule);
      EXPECT_EQ(sim.peak_bytes, outcome.plan->predicted.peak_bytes) << budget;
      EXPECT_NEAR(static_cast<double>(sim.makespan_ns) / 1e9, outcome.plan->predicted.step_seconds, 1e-9);
      // Memory returns to the resident state after the step: on the device, all of it, but under
      // L2L (the lowest budgets, where "all" uses L2L) what L2L keeps there.
      if (outcome.plan->choice.l2l) {
        EXPECT_LT(sim.memory.back().total(), costs.static_bytes()) << budget;
      } else {
        EXPECT_EQ(sim.memory.back().total(), costs.static_bytes()) << budget;
      }
    }
  }
}

}  // namespace
}  // namespace headroom
