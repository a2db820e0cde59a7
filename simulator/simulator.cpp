#include "simulator/simulator.h"

#include <algorithm>
#include <queue>
#include <stdexcept>
#include <string>

#include "core/chrome_trace.h"
#include "core/saturating.h"

namespace headroom::simulator {

std::int64_t MemorySample::total() const {
  std::int64_t sum = 0;
  for (const auto b : bytes) sum += b;
  return sum;
}

double Simulation::samples_per_second() const {
  return makespan_ns > 0 ? static_cast<double>(samples) * 1e9 / static_cast<double>(makespan_ns) : 0.0;
}

namespace {

constexpr std::size_t kStreams = core::kStreamNames.size();

class Engine {
 public:
  Engine(const core::Schedule& schedule, const SimulationOptions& options)
      : schedule_(schedule), options_(options), remaining_deps_(schedule.tasks.size(), 0) {
    const auto& tasks = schedule.tasks;
    // Dependents in one flat array (CSR), so finishing a task touches contiguous memory.
    std::vector<int> counts(tasks.size() + 1, 0);
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      for (const int d : tasks[i].dependencies) {
        if (d < 0 || static_cast<std::size_t>(d) >= tasks.size()) {
          throw std::invalid_argument("task " + std::to_string(i) + " depends on a task that does not exist");
        }
        ++counts[static_cast<std::size_t>(d) + 1];
        ++remaining_deps_[i];
      }
      stream_tasks_[static_cast<std::size_t>(tasks[i].stream)].push_back(static_cast<int>(i));
    }
    for (std::size_t i = 1; i < counts.size(); ++i) counts[i] += counts[i - 1];
    dependent_offsets_ = counts;
    dependents_.resize(static_cast<std::size_t>(counts.back()));
    std::vector<int> fill(counts.begin(), counts.end() - 1);
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      for (const int d : tasks[i].dependencies) dependents_[static_cast<std::size_t>(fill[static_cast<std::size_t>(d)]++)] = static_cast<int>(i);
    }
    std::int64_t after_previous = 0;
    for (std::size_t k = 0; k < schedule.repeats.size(); ++k) {
      const core::Repeat& r = schedule.repeats[k];
      const std::int64_t end = std::int64_t{r.first_task} + r.task_count;
      if (r.first_task < after_previous || r.task_count < 1 || end > static_cast<std::int64_t>(tasks.size()) || r.times < 1) {
        throw std::invalid_argument("repeat " + std::to_string(k) + " (tasks " + std::to_string(r.first_task) + " to " +
                                    std::to_string(end - 1) + ", " + std::to_string(r.times) +
                                    " times) is empty, overlaps the one before, ends past the last task or runs fewer than once");
      }
      after_previous = end;
    }
  }

  Simulation run() {
    const auto& tasks = schedule_.tasks;
    result_.tasks.resize(tasks.size());
    if (options_.record_memory) result_.memory.reserve(2 * tasks.size() + 1);
    result_.samples = schedule_.samples;
    for (const auto& change : schedule_.resident) apply(change);
    record(0, -1);
    // A repeat runs alone, so the step is a sequence of phases: each repeat and the tasks between.
    int begin = 0;
    for (const auto& repeat : schedule_.repeats) {
      if (repeat.first_task > begin) run_phase(repeat.first_task);
      run_repeat(repeat);
      begin = repeat.first_task + repeat.task_count;
    }
    if (static_cast<std::size_t>(begin) < tasks.size()) run_phase(static_cast<int>(tasks.size()));
    result_.makespan_ns = now_;
    return std::move(result_);
  }

 private:
  void apply(const core::MemoryChange& change) {
    level_[static_cast<std::size_t>(change.kind)] += change.bytes;
    total_ += change.bytes;
  }

  void note_peak(std::int64_t time, int task) {
    if (!have_peak_ || total_ > result_.peak_bytes) {
      have_peak_ = true;
      result_.peak_bytes = total_;
      result_.peak_time_ns = time;
      result_.peak_task = task;
    }
    if (!have_phase_peak_ || total_ > phase_peak_) {
      have_phase_peak_ = true;
      phase_peak_ = total_;
      phase_peak_task_ = task;
    }
  }

  // Runs every task before `end` (those from earlier phases have finished), until all have.
  void run_phase(int end) {
    phase_end_ = end;
    start_ready();
    while (!running_.empty()) {
      const auto [at, task] = running_.top();
      running_.pop();
      now_ = at;
      finish(task);
      ++finished_;
      // Every end at this instant is processed before anything starts.
      if (!running_.empty() && running_.top().first == now_) continue;
      start_ready();
    }
    if (finished_ != static_cast<std::size_t>(end)) {
      throw std::invalid_argument("schedule deadlocks: " + std::to_string(schedule_.tasks.size() - finished_) +
                                  " tasks wait for dependencies that never finish");
    }
  }

  // The first repetition runs as tasks; it ends where it began (checked), so the others are it
  // again, shifted by its length each, and only move the clock.
  void run_repeat(const core::Repeat& repeat) {
    RepeatTiming timing;
    timing.start_ns = now_;
    timing.times = repeat.times;
    timing.first_sample = result_.memory.size();
    const auto before = level_;
    have_phase_peak_ = false;
    run_phase(repeat.first_task + repeat.task_count);
    if (level_ != before) {
      throw std::invalid_argument("repeated tasks " + std::to_string(repeat.first_task) + " to " +
                                  std::to_string(repeat.first_task + repeat.task_count - 1) +
                                  " do not end at the memory they started from, so their repetitions would differ");
    }
    timing.period_ns = now_ - timing.start_ns;
    timing.end_ns = core::saturating_add(timing.start_ns, core::saturating_mul(repeat.times, timing.period_ns));
    timing.end_sample = result_.memory.size();
    timing.peak_bytes = phase_peak_;
    timing.peak_task = phase_peak_task_;
    now_ = timing.end_ns;
    result_.repeats.push_back(timing);
  }

  void record(std::int64_t time, int task) {
    note_peak(time, task);
    if (options_.record_memory) result_.memory.push_back({time, level_});
  }

  void start_ready() {
    for (std::size_t s = 0; s < kStreams; ++s) {
      if (busy_[s]) continue;
      auto& queue = stream_tasks_[s];
      if (next_[s] >= queue.size()) continue;
      const int task = queue[next_[s]];
      if (task >= phase_end_) continue;  // a later phase's
      if (remaining_deps_[static_cast<std::size_t>(task)] > 0) continue;
      ++next_[s];
      busy_[s] = true;
      const core::Task& t = schedule_.tasks[static_cast<std::size_t>(task)];
      result_.tasks[static_cast<std::size_t>(task)].start_ns = now_;
      for (const auto& change : t.at_start) apply(change);
      apply({core::MemoryKind::Transient, t.transient_bytes});
      record(now_, task);
      running_.push({core::saturating_add(now_, t.duration_ns), task});
    }
  }

  void finish(int task) {
    const core::Task& t = schedule_.tasks[static_cast<std::size_t>(task)];
    result_.tasks[static_cast<std::size_t>(task)].end_ns = now_;
    busy_[static_cast<std::size_t>(t.stream)] = false;
    apply({core::MemoryKind::Transient, -t.transient_bytes});
    // In order: what the task leaves allocated counts before the frees listed after it.
    for (const auto& change : t.at_end) {
      apply(change);
      note_peak(now_, task);
    }
    record(now_, task);
    for (int k = dependent_offsets_[static_cast<std::size_t>(task)]; k < dependent_offsets_[static_cast<std::size_t>(task) + 1]; ++k) {
      --remaining_deps_[static_cast<std::size_t>(dependents_[static_cast<std::size_t>(k)])];
    }
  }

  using Running = std::pair<std::int64_t, int>;  // (end time, task)
  const core::Schedule& schedule_;
  SimulationOptions options_;
  std::vector<int> remaining_deps_;
  std::vector<int> dependent_offsets_;
  std::vector<int> dependents_;
  std::array<std::vector<int>, kStreams> stream_tasks_;
  std::array<std::size_t, kStreams> next_{};
  std::array<bool, kStreams> busy_{};
  std::priority_queue<Running, std::vector<Running>, std::greater<>> running_;
  std::array<std::int64_t, core::kMemoryKinds> level_{};
  std::int64_t total_ = 0;
  std::int64_t now_ = 0;
  std::size_t finished_ = 0;
  int phase_end_ = 0;
  std::int64_t phase_peak_ = 0;
  int phase_peak_task_ = -1;
  bool have_phase_peak_ = false;
  bool have_peak_ = false;
  Simulation result_;
};

}  // namespace

Simulation simulate(const core::Schedule& schedule, const SimulationOptions& options) {
  return Engine(schedule, options).run();
}

std::int64_t tasks_run(const core::Schedule& schedule) {
  auto count = static_cast<std::int64_t>(schedule.tasks.size());
  for (const auto& r : schedule.repeats) {
    count = core::saturating_add(count, core::saturating_mul(r.times - 1, r.task_count));
  }
  return count;
}

namespace {

nlohmann::json memory_values(const MemorySample& sample) {
  nlohmann::json values = nlohmann::json::object();
  for (std::size_t k = 0; k < core::kMemoryKinds; ++k) values[std::string(core::kMemoryKindNames[k])] = sample.bytes[k];
  return values;
}

// What the span standing for a repeat's other repetitions is called: by micro-batch where its
// tasks belong to one, "micro-batches 1..19998 (19998 like micro-batch 0)".
std::string repetitions_name(const core::Task& first, std::int64_t times) {
  if (first.micro_batch < 0) return "repetitions 2.." + std::to_string(times) + " of the tasks before";
  const std::int64_t m = first.micro_batch;
  return "micro-batches " + std::to_string(m + 1) + ".." + std::to_string(m + times - 1) + " (" +
         std::to_string(times - 1) + " like micro-batch " + std::to_string(m) + ")";
}

}  // namespace

nlohmann::json chrome_trace(const core::Schedule& schedule, const Simulation& simulation, const std::string& title) {
  core::ChromeTrace out;
  constexpr int kPid = 1;
  out.name_process(kPid, title);
  for (std::size_t s = 0; s < kStreams; ++s) out.name_thread(kPid, static_cast<int>(s) + 1, std::string(core::kStreamNames[s]));
  // Data parallel: a communication lane per worker, each with the all-reduces every worker runs at
  // once; past kWorkerLanes workers the last lane stands for the rest.
  constexpr int kWorkerLanes = 16;
  const int worker_lanes = schedule.workers > 1 ? std::min(schedule.workers, kWorkerLanes) : 0;
  const int first_worker_lane = static_cast<int>(kStreams) + 1;
  for (int w = 0; w < worker_lanes; ++w) {
    const bool rest = w + 1 == worker_lanes && schedule.workers > kWorkerLanes;
    out.name_thread(kPid, first_worker_lane + w,
                    rest ? "collective, workers " + std::to_string(w) + ".." + std::to_string(schedule.workers - 1)
                         : "collective, worker " + std::to_string(w));
  }
  std::size_t next_repeat = 0;
  for (std::size_t i = 0; i < schedule.tasks.size(); ++i) {
    const auto& t = schedule.tasks[i];
    const auto& timing = simulation.tasks[i];
    if (t.stream == core::Stream::Collective && worker_lanes > 0) {
      for (int w = 0; w < worker_lanes; ++w) {
        out.add_span(kPid, first_worker_lane + w, t.name, t.category, timing.start_ns, timing.end_ns - timing.start_ns,
                     {{"workers", schedule.workers}});
      }
      continue;
    }
    out.add_span(kPid, static_cast<int>(t.stream) + 1, t.name, t.category, timing.start_ns,
                 timing.end_ns - timing.start_ns, {{"micro_batch", t.micro_batch}, {"transient_bytes", t.transient_bytes}});
    if (next_repeat >= schedule.repeats.size() || next_repeat >= simulation.repeats.size()) continue;
    const core::Repeat& repeat = schedule.repeats[next_repeat];
    if (static_cast<std::int64_t>(i) != std::int64_t{repeat.first_task} + repeat.task_count - 1) continue;
    const RepeatTiming& r = simulation.repeats[next_repeat++];
    if (r.times < 2) continue;
    const core::Task& first = schedule.tasks[static_cast<std::size_t>(repeat.first_task)];
    nlohmann::json args = {{"repetitions", r.times - 1}, {"repetition_ns", r.period_ns}, {"peak_bytes", r.peak_bytes}};
    if (first.micro_batch >= 0) {
      args["first_micro_batch"] = first.micro_batch + 1;
      args["last_micro_batch"] = first.micro_batch + r.times - 1;
    }
    const std::int64_t second = core::saturating_add(r.start_ns, r.period_ns);
    // A stage-3 micro-batch starts with a gather, which every worker's lane draws: its repetitions
    // go on the compute lane with the micro-batch's work.
    const core::Stream lane = first.stream == core::Stream::Collective ? core::Stream::Compute : first.stream;
    out.add_span(kPid, static_cast<int>(lane) + 1, repetitions_name(first, r.times), "repeat", second,
                 r.end_ns - second, std::move(args));
  }
  next_repeat = 0;
  for (std::size_t i = 0; i < simulation.memory.size(); ++i) {
    out.add_counter(kPid, "memory", simulation.memory[i].time_ns, memory_values(simulation.memory[i]));
    // After a repeat's first repetition: its highest sample until the last one ends, then the level
    // it ends at (the one it started from).
    while (next_repeat < simulation.repeats.size() && simulation.repeats[next_repeat].end_sample == i + 1) {
      const RepeatTiming& r = simulation.repeats[next_repeat++];
      if (r.times < 2 || r.end_sample <= r.first_sample) continue;
      const auto highest = std::max_element(
          simulation.memory.begin() + static_cast<std::ptrdiff_t>(r.first_sample),
          simulation.memory.begin() + static_cast<std::ptrdiff_t>(r.end_sample),
          [](const MemorySample& a, const MemorySample& b) { return a.total() < b.total(); });
      out.add_counter(kPid, "memory", core::saturating_add(r.start_ns, r.period_ns), memory_values(*highest));
      out.add_counter(kPid, "memory", r.end_ns, memory_values(simulation.memory[i]));
    }
  }
  return out.to_json();
}

}  // namespace headroom::simulator
