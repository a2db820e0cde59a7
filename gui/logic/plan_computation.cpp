#include "gui/logic/plan_computation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "core/cost_model.h"
#include "core/errors.h"
#include "core/host_memory.h"
#include "core/saturating.h"
#include "core/units.h"
#include "planner/l2l_model.h"
#include "planner/optimizer_estimate.h"
#include "planner/plan_for_machine.h"
#include "planner/plan_schedule.h"
#include "report/plan_report.h"
#include "simulator/simulator.h"

namespace headroom::gui {

planner::PlanRequest plan_request(const TraceDocument& trace, const PlanInputs& inputs) {
  planner::PlanRequest request;
  request.budget_bytes = inputs.budget_bytes;
  request.global_batch = inputs.global_batch;
  request.margin_fraction = inputs.margin_fraction;
  request.strategies = inputs.strategies;
  // L2L's training state must fit this machine's memory, as `headroom plan` checks it.
  if (inputs.strategies.contains(planner::Strategy::L2L)) request.host_memory_bytes = core::available_host_memory_bytes();
  request.trace_path = trace.path;
  request.trace_sha256 = trace.sha256;
  request.optimizer = inputs.optimizer;
  request.workers = inputs.workers;
  request.link = inputs.link;
  return request;
}

std::string MemoryTimeline::describe(const TaskSpan& task) const {
  const std::string& category = categories.at(task.category);
  if (category == "optimizer") return "optimizer step";
  std::string what = category;
  if (task.layer >= 0 && static_cast<std::size_t>(task.layer) < layer_names.size()) {
    what += " of " + layer_names[static_cast<std::size_t>(task.layer)];
  }
  if (task.micro_batch >= 0 && micro_batches > 1) {
    what += " (micro-batch " + std::to_string(task.micro_batch + 1) + " of " + std::to_string(micro_batches) + ")";
  }
  return what;
}

namespace {

// Keeps, per time bin, the first sample with the highest total, and says which bin a time is in.
class MemoryBins {
 public:
  MemoryBins(MemoryTimeline& out, int max_bins, std::int64_t span) : out_(out), max_bins_(max_bins), span_(span) {}

  int bin(std::int64_t time_ns) const {
    // Exact in integers where the product fits (every step shorter than about four months).
    const std::int64_t b = time_ns <= std::numeric_limits<std::int64_t>::max() / max_bins_
                               ? time_ns * max_bins_ / span_
                               : static_cast<std::int64_t>(static_cast<long double>(time_ns) * max_bins_ / span_);
    return static_cast<int>(std::min<std::int64_t>(max_bins_ - 1, b));
  }

  void offer(std::int64_t time_ns, const simulator::MemorySample& sample) {
    const int b = bin(time_ns);
    const std::int64_t total = sample.total();
    if (b != current_ || out_.bytes.empty()) {
      out_.time_ms.push_back(static_cast<double>(time_ns) / 1e6);
      out_.bytes.push_back(sample.bytes);
      current_ = b;
      current_total_ = total;
    } else if (total > current_total_) {
      out_.time_ms.back() = static_cast<double>(time_ns) / 1e6;
      out_.bytes.back() = sample.bytes;
      current_total_ = total;
    }
  }

 private:
  MemoryTimeline& out_;
  std::int64_t max_bins_;
  std::int64_t span_;
  int current_ = -1;
  std::int64_t current_total_ = 0;
};

// The first highest total among a repetition's samples [a, b), in constant time (a sparse table).
class FirstHighest {
 public:
  explicit FirstHighest(std::vector<std::int64_t> totals) : totals_(std::move(totals)) {
    const std::size_t n = totals_.size();
    table_.emplace_back(n);
    for (std::size_t i = 0; i < n; ++i) table_[0][i] = i;
    for (std::size_t width = 2; width <= n; width *= 2) {
      const auto& below = table_.back();
      std::vector<std::size_t> level(n - width + 1);
      for (std::size_t i = 0; i < level.size(); ++i) level[i] = pick(below[i], below[i + width / 2]);
      table_.push_back(std::move(level));
    }
  }
  std::size_t operator()(std::size_t a, std::size_t b) const {
    std::size_t level = 0;
    while ((std::size_t{2} << level) <= b - a) ++level;
    return pick(table_[level][a], table_[level][b - (std::size_t{1} << level)]);
  }

 private:
  // Ties go to the earlier sample: the bins keep the first of equals.
  std::size_t pick(std::size_t left, std::size_t right) const { return totals_[right] > totals_[left] ? right : left; }
  std::vector<std::int64_t> totals_;
  std::vector<std::vector<std::size_t>> table_;
};

// Offers a repeat's samples as if every repetition had been simulated, in time order, but each
// stretch of a repetition inside one bin is one offer (its first highest sample: the others could
// not change what the bin keeps), and the repetitions that end in the bin where one lies whole none
// (they are that one again). So the work follows the bins and the samples of one repetition, not
// the number of repetitions.
void offer_repeat(MemoryBins& bins, const std::vector<simulator::MemorySample>& memory, const simulator::RepeatTiming& r) {
  const auto first = memory.begin() + static_cast<std::ptrdiff_t>(r.first_sample);
  const std::size_t count = r.end_sample - r.first_sample;
  std::vector<std::int64_t> offsets(count), totals(count);
  for (std::size_t j = 0; j < count; ++j) {
    offsets[j] = first[static_cast<std::ptrdiff_t>(j)].time_ns - r.start_ns;
    totals[j] = first[static_cast<std::ptrdiff_t>(j)].total();
  }
  const FirstHighest highest(std::move(totals));
  const auto at = [&](std::int64_t rep, std::size_t j) {
    return core::saturating_add(core::saturating_add(r.start_ns, core::saturating_mul(rep, r.period_ns)), offsets[j]);
  };
  const auto offer = [&](std::int64_t rep, std::size_t j) { bins.offer(at(rep, j), first[static_cast<std::ptrdiff_t>(j)]); };
  for (std::int64_t rep = 0; rep < r.times;) {
    const int opens = bins.bin(at(rep, 0));
    if (opens == bins.bin(at(rep, count - 1))) {
      offer(rep, highest(0, count));
      // The repetitions after it that end in this bin too: the first one that does not, by bisection.
      std::int64_t lo = rep + 1, hi = r.times;
      while (lo < hi) {
        const std::int64_t mid = lo + (hi - lo) / 2;
        if (bins.bin(at(mid, count - 1)) > opens) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      rep = lo;
      continue;
    }
    // Across bins: per bin, the samples in it (their end by bisection), one offer each.
    for (std::size_t j = 0; j < count;) {
      const int bin = bins.bin(at(rep, j));
      std::size_t lo = j + 1, hi = count;
      while (lo < hi) {
        const std::size_t mid = lo + (hi - lo) / 2;
        if (bins.bin(at(rep, mid)) > bin) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      offer(rep, highest(j, lo));
      j = lo;
    }
    ++rep;
  }
}

}  // namespace

MemoryTimeline memory_timeline(const core::Trace& trace, const core::Plan& plan, int max_bins) {
  const auto schedule = planner::plan_schedule(trace, plan, "plan");
  std::vector<std::string> names;
  names.reserve(trace.layers.size());
  for (const auto& layer : trace.layers) names.push_back(layer.name);
  return memory_timeline(schedule, simulator::simulate(schedule), std::move(names), plan.choice.micro_batches.size(),
                         max_bins);
}

MemoryTimeline memory_timeline(const core::Schedule& schedule, const simulator::Simulation& sim,
                               std::vector<std::string> layer_names, std::size_t micro_batches, int max_bins) {
  MemoryTimeline timeline;
  timeline.peak_bytes = sim.peak_bytes;
  timeline.peak_time_ms = static_cast<double>(sim.peak_time_ns) / 1e6;
  timeline.step_ms = static_cast<double>(sim.makespan_ns) / 1e6;
  timeline.micro_batches = micro_batches;
  timeline.layer_names = std::move(layer_names);
  // The compute stream runs its tasks one at a time in schedule order, so they are in time order.
  std::size_t next_repeat = 0;
  for (std::size_t i = 0; i < schedule.tasks.size() && i < sim.tasks.size(); ++i) {
    if (next_repeat < schedule.repeats.size() && next_repeat < sim.repeats.size() &&
        static_cast<int>(i) == schedule.repeats[next_repeat].first_task) {
      const simulator::RepeatTiming& r = sim.repeats[next_repeat];
      RepeatSpan span;
      span.start_ms = static_cast<double>(r.start_ns) / 1e6;
      span.period_ms = static_cast<double>(r.period_ns) / 1e6;
      span.end_ms = static_cast<double>(r.end_ns) / 1e6;
      span.times = r.times;
      span.first_task = timeline.tasks.size();
      span.low_bytes = r.end_sample > 0 ? sim.memory[r.end_sample - 1].total() : 0;
      span.peak_bytes = r.peak_bytes;
      // Narrower than a few bins, a repetition's rise and fall cannot be told apart on the chart.
      span.banded = r.times > 1 && static_cast<double>(r.period_ns) * max_bins < 4.0 * static_cast<double>(sim.makespan_ns);
      timeline.repeats.push_back(span);
    }
    const core::Task& task = schedule.tasks[i];
    if (task.stream == core::Stream::Compute) {
      auto category = std::find(timeline.categories.begin(), timeline.categories.end(), task.category);
      if (category == timeline.categories.end()) category = timeline.categories.insert(category, task.category);
      timeline.tasks.push_back({static_cast<double>(sim.tasks[i].start_ns) / 1e6,
                                static_cast<double>(sim.tasks[i].end_ns) / 1e6, task.layer, task.micro_batch,
                                static_cast<std::size_t>(category - timeline.categories.begin())});
    }
    if (next_repeat < schedule.repeats.size() && next_repeat < sim.repeats.size() &&
        static_cast<std::int64_t>(i) + 1 ==
            std::int64_t{schedule.repeats[next_repeat].first_task} + schedule.repeats[next_repeat].task_count) {
      timeline.repeats.back().task_count = timeline.tasks.size() - timeline.repeats.back().first_task;
      ++next_repeat;
    }
  }
  // Per time bin, the sample with the highest total; the last sample of the step is kept too, so
  // the timeline ends where the step does.
  MemoryBins bins(timeline, max_bins, std::max<std::int64_t>(sim.makespan_ns, 1));
  std::size_t k = 0;  // the next repeat
  std::int64_t last_time = 0;
  for (std::size_t i = 0; i < sim.memory.size();) {
    while (k < sim.repeats.size() && sim.repeats[k].end_sample <= i && sim.repeats[k].first_sample < i) ++k;
    if (k < sim.repeats.size() && sim.repeats[k].first_sample == i && sim.repeats[k].end_sample > i) {
      const simulator::RepeatTiming& r = sim.repeats[k++];
      offer_repeat(bins, sim.memory, r);
      last_time = core::saturating_add(sim.memory[r.end_sample - 1].time_ns, core::saturating_mul(r.times - 1, r.period_ns));
      i = r.end_sample;
      continue;
    }
    bins.offer(sim.memory[i].time_ns, sim.memory[i]);
    last_time = sim.memory[i].time_ns;
    ++i;
  }
  if (!sim.memory.empty() && timeline.time_ms.back() != static_cast<double>(last_time) / 1e6) {
    timeline.time_ms.push_back(static_cast<double>(last_time) / 1e6);
    timeline.bytes.push_back(sim.memory.back().bytes);
  }
  return timeline;
}

std::string memory_hover_text(const MemoryTimeline& timeline, double time_ms) {
  if (timeline.time_ms.empty() || time_ms < 0 || time_ms > timeline.step_ms) return {};
  // Memory holds from one sample to the next: the sample in force is the last one not after time_ms.
  const auto after = std::upper_bound(timeline.time_ms.begin(), timeline.time_ms.end(), time_ms);
  const std::size_t at = after == timeline.time_ms.begin() ? 0 : static_cast<std::size_t>(after - timeline.time_ms.begin()) - 1;
  char head[64];
  std::snprintf(head, sizeof head, "%.4g ms into the step", time_ms);
  std::string text = head;
  // In a run of identical micro-batches, the task of the first one at the same point of its own.
  double at_time = time_ms;
  std::int64_t later = 0;
  for (const RepeatSpan& repeat : timeline.repeats) {
    if (repeat.times > 1 && repeat.period_ms > 0 && repeat.start_ms + repeat.period_ms <= time_ms && time_ms < repeat.end_ms) {
      later = std::min(repeat.times - 1, static_cast<std::int64_t>((time_ms - repeat.start_ms) / repeat.period_ms));
      at_time = std::max(repeat.start_ms, time_ms - static_cast<double>(later) * repeat.period_ms);
      break;
    }
  }
  for (const TaskSpan& task : timeline.tasks) {
    if (task.start_ms <= at_time && at_time < task.end_ms) {
      TaskSpan shown = task;
      if (shown.micro_batch >= 0) shown.micro_batch += static_cast<int>(later);
      text += "\n" + timeline.describe(shown);
      break;
    }
  }
  std::int64_t total = 0;
  for (std::size_t k = 0; k < core::kMemoryKinds; ++k) {
    const std::int64_t bytes = timeline.bytes[at][k];
    total += bytes;
    if (bytes != 0) text += "\n" + std::string(core::kMemoryKindLabels[k]) + ": " + core::format_bytes(bytes);
  }
  text += "\ntotal: " + core::format_bytes(total);
  if (total == timeline.peak_bytes) text += " (the peak)";
  return text;
}

std::string throughput_hover_text(const ThroughputPoint& point) {
  char line[160];
  std::string text;
  std::snprintf(line, sizeof line, "micro-batch %lld%s", static_cast<long long>(point.micro_batch),
                point.count > 1 ? (" (" + std::to_string(point.count) + " micro-batches)").c_str() : " (the whole batch)");
  text += line;
  text += "\npeak " + core::format_bytes(point.peak_bytes) + (point.fits ? ", fits the budget" : ", over the budget");
  std::snprintf(line, sizeof line, "\n%.4g s/step, %.4g samples/s", point.step_seconds, point.samples_per_second);
  text += line;
  text += "\n" + std::to_string(point.checkpointed_blocks) + " checkpointed block" +
          (point.checkpointed_blocks == 1 ? "" : "s") + ", " + std::to_string(point.tempo_layers) + " Tempo layer" +
          (point.tempo_layers == 1 ? "" : "s");
  if (!point.fits) text += "\n(without checkpointing or Tempo layers: nothing made it fit)";
  return text;
}

std::int64_t allowed_bytes(std::int64_t budget_bytes, double margin_fraction) {
  // As the planner rounds its margin: up, so the allowed bytes are never more than it allows.
  return budget_bytes - static_cast<std::int64_t>(std::ceil(static_cast<double>(budget_bytes) * margin_fraction));
}

ThroughputCurve throughput_curve(const planner::PlanOutcome& outcome) {
  ThroughputCurve curve;
  for (const auto& split : outcome.splits) {
    curve.points.push_back({split.micro_batch, split.count,
                            split.predicted.samples_per_second, split.predicted.peak_bytes, split.fits,
                            split.checkpointed_blocks, split.tempo_layers, split.predicted.step_seconds});
  }
  std::sort(curve.points.begin(), curve.points.end(),
            [](const ThroughputPoint& a, const ThroughputPoint& b) { return a.micro_batch < b.micro_batch; });
  if (outcome.plan) {
    for (std::size_t i = 0; i < curve.points.size(); ++i) {
      if (curve.points[i].micro_batch == outcome.plan->choice.micro_batches.front() &&
          curve.points[i].count == static_cast<std::int64_t>(outcome.plan->choice.micro_batches.size())) {
        curve.chosen = static_cast<int>(i);
      }
    }
  }
  return curve;
}

namespace {

// The planner names its request's fields; the window names its own controls.
std::string in_window_words(std::string message) {
  static const std::pair<std::string_view, std::string_view> kControls[] = {
      {"global_batch: ", "Global batch: "}, {"budget_bytes: ", "Budget: "},
      {"margin_fraction: ", "Margin: "}, {"strategies: ", "Strategies: "}};
  for (const auto& [field, control] : kControls) {
    if (message.starts_with(field)) return std::string(control) + message.substr(field.size());
  }
  return message;
}

}  // namespace

core::Plan plan_as_written(const TraceDocument& trace, core::Plan plan) {
  // Only of the trace the plan was made from, as its times were then: a replan may not have caught
  // up yet with another trace opened, another of its precisions chosen, or this one rescaled to the
  // machine (it follows soon).
  if (plan.trace_sha256 == trace.sha256 && plan.precision == trace.trace.precision && plan.calibration == trace.trace.calibration) {
    planner::add_time_by_class(trace.trace, plan);
  }
  return plan;
}

PlanResult compute_plan(const TraceDocument& trace, const PlanInputs& inputs) {
  const auto start = std::chrono::steady_clock::now();
  PlanResult result;
  result.inputs = inputs;
  try {
    const planner::PlanRequest request = plan_request(trace, inputs);
    // As `headroom plan` plans: this machine's regime, its times' note and host memory.
    planner::PlanningMachine machine{trace.trace.calibration, trace.machine_note, core::headroom_regime()};
    machine.time_by_class = false;  // added as the plan leaves the app (plan_as_written)
    planner::PlanOutcome outcome = planner::plan_for_machine(trace.trace, request, machine);
    result.throughput = throughput_curve(outcome);
    if (outcome.plan) {
      // Moved: a plan of many micro-batches lists hundreds of thousands.
      result.plan = std::move(outcome.plan);
      result.timeline = memory_timeline(trace.trace, *result.plan);
      result.summary = report::render_plan_summary(*result.plan);
      // Several workers: each shard stage's plan beside the chosen one.
      if (const auto& dp = result.plan->choice.data_parallel; dp && !outcome.shard_stages.empty()) {
        result.summary += "\n" + report::render_shard_stages(outcome.shard_stages, *dp);
      }
      // A trace of several precisions: each one's plan for the same inputs, beside this one.
      if (!trace.trace.other_precisions.empty()) {
        result.summary += "\n" + report::render_precision_comparison(planner::plan_each_precision(trace.trace, request, machine, *result.plan),
                                                                      trace.trace.precision);
      }
    } else {
      result.infeasible_reason = outcome.reason;
      // L2L unticked where it would need less: say so, and how much.
      if (const std::int64_t l2l_least =
              planner::least_budget_with_l2l(trace.trace, request, outcome, core::available_host_memory_bytes());
          l2l_least > 0) {
        const auto& l2l = planner::strategy_entry(planner::Strategy::L2L);
        result.infeasible_reason += "; with " + std::string(l2l.label) + " ticked as well it must be at least " +
                                    core::format_bytes_at_least(l2l_least);
      }
      result.smallest_budget = outcome.smallest_budget;
      result.summary = "infeasible: " + result.infeasible_reason + "\n";
      // L2L keeps the training state on the host: with it, no floor holds the device.
      const bool l2l_allowed = inputs.strategies.contains(planner::Strategy::L2L) && inputs.workers <= 1 &&
                               planner::l2l_can_run(trace.trace);
      const bool other_optimizer = !inputs.optimizer.empty() && inputs.optimizer != trace.trace.optimizer.name;
      result.floor_bytes =
          l2l_allowed ? 0
                      : core::CostModel(other_optimizer ? planner::with_estimated_optimizer(trace.trace, inputs.optimizer)
                                                    : trace.trace)
                        .static_bytes();
      // Sharded, a worker holds less than the whole training state: the least stage's share.
      for (const auto& stage : outcome.shard_stages) {
        if (!l2l_allowed) result.floor_bytes = std::min(result.floor_bytes, stage.static_bytes);
      }
      if (outcome.smallest_budget > 0) {
        planner::PlanRequest least = plan_request(trace, inputs);
        least.budget_bytes = outcome.smallest_budget;
        const planner::PlanOutcome attempt = planner::plan_step(trace.trace, least);
        if (attempt.plan) {
          result.best_attempt = attempt.plan;
          result.timeline = memory_timeline(trace.trace, *attempt.plan);
        }
      }
    }
  } catch (const core::InputError& e) {
    result.error = in_window_words(e.what());
    result.summary = "cannot plan: " + result.error + "\n";
  }
  result.compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace headroom::gui
