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
  }

  Simulation run() {
    const auto& tasks = schedule_.tasks;
    result_.tasks.resize(tasks.size());
    if (options_.record_memory) result_.memory.reserve(2 * tasks.size() + 1);
    result_.samples = schedule_.samples;
    for (const auto& change : schedule_.resident) apply(change);
    record(0, -1);
    std::size_t finished = 0;
    start_ready();
    while (!running_.empty()) {
      const auto [end, task] = running_.top();
      running_.pop();
      now_ = end;
      finish(task);
      ++finished;
      // Every end at this instant is processed before anything starts.
      if (!running_.empty() && running_.top().first == now_) continue;
      start_ready();
    }
    if (finished != tasks.size()) {
      throw std::invalid_argument("schedule deadlocks: " + std::to_string(tasks.size() - finished) +
                                  " tasks wait for dependencies that never finish");
    }
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
  bool have_peak_ = false;
  Simulation result_;
};

}  // namespace

Simulation simulate(const core::Schedule& schedule, const SimulationOptions& options) {
  return Engine(schedule, options).run();
}

nlohmann::json chrome_trace(const core::Schedule& schedule, const Simulation& simulation, const std::string& title) {
  core::ChromeTrace out;
  constexpr int kPid = 1;
  out.name_process(kPid, title);
  for (std::size_t s = 0; s < kStreams; ++s) out.name_thread(kPid, static_cast<int>(s) + 1, std::string(core::kStreamNames[s]));
  for (std::size_t i = 0; i < schedule.tasks.size(); ++i) {
    const auto& t = schedule.tasks[i];
    const auto& timing = simulation.tasks[i];
    out.add_span(kPid, static_cast<int>(t.stream) + 1, t.name, t.category, timing.start_ns,
                 timing.end_ns - timing.start_ns, {{"micro_batch", t.micro_batch}, {"transient_bytes", t.transient_bytes}});
  }
  for (const auto& sample : simulation.memory) {
    nlohmann::json values = nlohmann::json::object();
    for (std::size_t k = 0; k < core::kMemoryKinds; ++k) values[std::string(core::kMemoryKindNames[k])] = sample.bytes[k];
    out.add_counter(kPid, "memory", sample.time_ns, values);
  }
  return out.to_json();
}

}  // namespace headroom::simulator
