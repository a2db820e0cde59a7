#include <gtest/gtest.h>

#include "simulator/simulator.h"

namespace headroom {
namespace {

using core::MemoryKind;
using core::Stream;

core::Task task(std::string name, Stream stream, std::int64_t duration, std::vector<int> deps,
                std::vector<core::MemoryChange> at_start, std::int64_t transient, std::vector<core::MemoryChange> at_end) {
  core::Task t;
  t.name = std::move(name);
  t.stream = stream;
  t.duration_ns = duration;
  t.dependencies = std::move(deps);
  t.at_start = std::move(at_start);
  t.transient_bytes = transient;
  t.at_end = std::move(at_end);
  return t;
}

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
      task("A", Stream::Compute, 10, {}, {{MemoryKind::Activation, 100}}, 20, {{MemoryKind::Activation, -30}}),
      task("B", Stream::HostToDevice, 5, {}, {{MemoryKind::Input, 40}}, 0, {}),
      task("C", Stream::Compute, 4, {0, 1}, {}, 10, {{MemoryKind::Activation, -70}, {MemoryKind::Input, -40}}),
      task("D", Stream::DeviceToHost, 8, {1}, {{MemoryKind::Activation, 16}}, 0, {{MemoryKind::Activation, -16}}),
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
      task("X", Stream::Compute, 5, {}, {{MemoryKind::Activation, 50}}, 0, {{MemoryKind::Activation, -50}}),
      task("Z", Stream::HostToDevice, 5, {}, {}, 0, {}),
      task("Y", Stream::HostToDevice, 1, {}, {{MemoryKind::Activation, 60}}, 0, {{MemoryKind::Activation, -60}}),
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
  s.tasks = {task("last backward", Stream::Compute, 3, {}, {{MemoryKind::Input, 10}}, 5,
                  {{MemoryKind::Activation, 40}, {MemoryKind::Activation, -40}, {MemoryKind::Input, -10}})};
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
      task("copy", Stream::HostToDevice, 7, {}, {}, 0, {}),
      task("first", Stream::Compute, 2, {0}, {}, 0, {}),
      task("second", Stream::Compute, 3, {}, {}, 0, {}),  // behind "first" in its stream
  };
  const auto sim = simulator::simulate(s);
  EXPECT_EQ(sim.tasks[1].start_ns, 7);
  EXPECT_EQ(sim.tasks[2].start_ns, 9);
  EXPECT_EQ(sim.makespan_ns, 12);
}

TEST(Simulator, RejectsSchedulesThatCannotFinish) {
  core::Schedule s;
  s.tasks = {task("waits", Stream::Compute, 1, {1}, {}, 0, {}), task("behind", Stream::Compute, 1, {}, {}, 0, {})};
  EXPECT_THROW(simulator::simulate(s), std::invalid_argument);
  s.tasks = {task("dangling", Stream::Compute, 1, {5}, {}, 0, {})};
  EXPECT_THROW(simulator::simulate(s), std::invalid_argument);
}

TEST(Simulator, ChromeTraceHasLanesSpansAndMemory) {
  core::Schedule s;
  s.tasks = {task("A", Stream::Compute, 2000, {}, {{MemoryKind::Activation, 8}}, 0, {{MemoryKind::Activation, -8}})};
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
