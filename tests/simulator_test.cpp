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
