#pragma once
// A schedule with its repeats written out, every repetition its own tasks: what schedules were
// before repeats, kept for tests that check a repeat simulates exactly as its copies would.
#include <algorithm>
#include <vector>

#include "core/schedule.h"

namespace headroom::testing {

inline core::Schedule expand_repeats(const core::Schedule& schedule) {
  core::Schedule out;
  out.resident = schedule.resident;
  out.samples = schedule.samples;
  // A repeat runs alone. Written out, that is a barrier between phases (the tasks before a repeat,
  // each of its repetitions, the tasks after it): a phase's tasks that wait for none of their own
  // phase wait for every task of the phase before that none of that phase waits for.
  std::vector<int> latest(schedule.tasks.size(), -1);  // each task's latest copy
  std::vector<int> previous_sinks;
  const auto phase = [&](std::size_t begin, std::size_t end, int micro_batch_shift) {
    const int first_out = static_cast<int>(out.tasks.size());
    for (std::size_t k = begin; k < end; ++k) {
      core::Task task = schedule.tasks[k];
      if (task.micro_batch >= 0) task.micro_batch += micro_batch_shift;
      bool waits_in_phase = false;
      for (int& d : task.dependencies) {
        waits_in_phase = waits_in_phase || (static_cast<std::size_t>(d) >= begin && static_cast<std::size_t>(d) < end);
        d = latest[static_cast<std::size_t>(d)];
      }
      if (!waits_in_phase) task.dependencies.insert(task.dependencies.end(), previous_sinks.begin(), previous_sinks.end());
      latest[k] = static_cast<int>(out.tasks.size());
      out.tasks.push_back(std::move(task));
    }
    std::vector<bool> waited_for(end - begin, false);
    for (std::size_t k = begin; k < end; ++k) {
      for (const int d : schedule.tasks[k].dependencies) {
        if (static_cast<std::size_t>(d) >= begin && static_cast<std::size_t>(d) < end) waited_for[static_cast<std::size_t>(d) - begin] = true;
      }
    }
    previous_sinks.clear();
    for (std::size_t k = 0; k < waited_for.size(); ++k) {
      if (!waited_for[k]) previous_sinks.push_back(first_out + static_cast<int>(k));
    }
  };
  std::size_t done = 0;
  for (const core::Repeat& repeat : schedule.repeats) {
    const auto begin = static_cast<std::size_t>(repeat.first_task);
    if (begin > done) phase(done, begin, 0);
    for (std::int64_t r = 0; r < repeat.times; ++r) phase(begin, begin + static_cast<std::size_t>(repeat.task_count), static_cast<int>(r));
    done = begin + static_cast<std::size_t>(repeat.task_count);
  }
  if (done < schedule.tasks.size()) phase(done, schedule.tasks.size(), 0);
  return out;
}

}  // namespace headroom::testing
