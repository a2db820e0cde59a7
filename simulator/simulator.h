#pragma once
// A discrete-event engine for schedules: each stream runs its tasks in order, one at a time; a task
// starts once its stream is free and its dependencies have finished. Memory changes apply when a
// task starts and ends, and its transient bytes are held while it runs. A task's changes at its end
// apply in order and the peak sees the level after each (an op's own allocation, then the frees
// listed after it). Ends at the same instant are processed before starts, so frees come before the
// allocations that may reuse them. A repeated run of tasks (core::Repeat) is simulated once and
// its other repetitions added as time: they are the first one shifted, so a step of 20,000
// identical micro-batches costs what one costs, in time and memory.
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

// A core::Repeat as it ran. Its first repetition is simulated: its tasks' timings and memory samples
// are in Simulation::tasks and ::memory, those of repetition r are the same `r * period_ns` later.
struct RepeatTiming {
  std::int64_t start_ns = 0;   // when the first repetition starts (its first task)
  std::int64_t period_ns = 0;  // how long each repetition takes
  std::int64_t end_ns = 0;     // when the last one ends: start_ns + times * period_ns
  std::int64_t times = 1;
  std::size_t first_sample = 0;  // the first repetition's samples are memory[first_sample, end_sample)
  std::size_t end_sample = 0;
  std::int64_t peak_bytes = 0;  // the highest total each repetition reaches
  int peak_task = -1;           // the first repetition's task at that peak
};

struct Simulation {
  std::vector<TaskTiming> tasks;      // per schedule task; in a repeat, its first repetition's
  std::vector<RepeatTiming> repeats;  // per schedule repeat
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

// Throws std::invalid_argument for a schedule whose dependencies can never be met, or whose repeats
// overlap, leave the task list or do not end at the memory they started from.
Simulation simulate(const core::Schedule& schedule, const SimulationOptions& options = {});

// Tasks the step runs, each repetition counted (saturating).
std::int64_t tasks_run(const core::Schedule& schedule);

// Lanes per stream with one span per task, and a memory counter track stacked by kind. A repeat's
// first repetition is drawn in full and the others as one span, named for the micro-batches it
// stands for, over which the memory counter holds a repetition's peak (each one reaches it): the
// trace stays a few MB however many micro-batches the step has.
nlohmann::json chrome_trace(const core::Schedule& schedule, const Simulation& simulation, const std::string& title);

}  // namespace headroom::simulator
