#pragma once
// A discrete-event engine for schedules: each stream runs its tasks in order, one at a time; a task
// starts once its stream is free and its dependencies have finished. Memory changes apply when a
// task starts and ends, and its transient bytes are held while it runs. A task's changes at its end
// apply in order and the peak sees the level after each (an op's own allocation, then the frees
// listed after it). Ends at the same instant are processed before starts, so frees come before the
// allocations that may reuse them.
#include <array>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/schedule.h"

namespace headroom::simulator {

struct TaskTiming {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

struct MemorySample {
  std::int64_t time_ns = 0;
  std::array<std::int64_t, core::kMemoryKinds> bytes{};  // by core::MemoryKind
  std::int64_t total() const;
};

struct Simulation {
  std::vector<TaskTiming> tasks;
  std::int64_t makespan_ns = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t peak_time_ns = 0;
  int peak_task = -1;                 // the task running (or ending) when the peak was reached
  std::vector<MemorySample> memory;   // after every change, when recorded
  std::int64_t samples = 0;
  double samples_per_second() const;
};

struct SimulationOptions {
  bool record_memory = true;
};

// Throws std::invalid_argument for a schedule whose dependencies can never be met.
Simulation simulate(const core::Schedule& schedule, const SimulationOptions& options = {});

// Lanes per stream with one span per task, and a memory counter track stacked by kind.
nlohmann::json chrome_trace(const core::Schedule& schedule, const Simulation& simulation, const std::string& title);

}  // namespace headroom::simulator
