#include <gtest/gtest.h>

#include "simulator/simulator.h"

namespace headroom {
namespace {

using core::MemoryKind;
using core::Stream;

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

// L2L's relay by hand: the device holds one layer's parameters (10 bytes each) at a time beside a
// resident 100; layer 2's copy overlaps layer 1's compute, gradients go back to the host, where the
// optimizer steps each layer as its gradients arrive.
//   t=0   p1 copies host-to-device (+10): 110
//   t=3   F1 computes (transient 5) while p2 copies (+10): 125, the peak
//   t=8   F1 ends and frees p1 (-10); g1 goes device-to-host (+4); F2 computes (transient 5): 124
//   t=10  g1 is on the host (-4); the host optimizer steps layer 1 (10..16)
//   t=13  F2 ends and frees p2; g2 goes to the host (13..15); the optimizer steps layer 2 (16..22)
TEST(Simulator, L2lRelayOverlapsCopiesComputeAndTheHostOptimizer) {
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

}  // namespace
}  // namespace headroom
