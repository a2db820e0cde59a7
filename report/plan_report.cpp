#include "report/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "core/sharding.h"
#include "core/units.h"
#include "planner/technique.h"
#include "report/text_table.h"

namespace headroom::report {

namespace {

std::string rate(double samples_per_second) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", samples_per_second);
  return buffer;
}

// "4 x 8", or "2 x 11 + 1 x 10" where the last micro-batches are smaller.
std::string micro_batch_shape(const std::vector<std::int64_t>& micro) {
  std::size_t of_first = 0;
  for (const auto b : micro) of_first += b == micro.front();
  std::string shape = std::to_string(of_first) + " x " + std::to_string(micro.front());
  if (micro.back() != micro.front()) shape += " + " + std::to_string(micro.size() - of_first) + " x " + std::to_string(micro.back());
  return shape;
}

std::string seconds(double s) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4f", s);
  return buffer;
}

}  // namespace

std::string render_plan_summary(const core::Plan& plan) {
  std::ostringstream out;
  const std::int64_t allowed = plan.budget_bytes - plan.margin_bytes;
  out << "plan for " << plan.model << " (" << plan.device << " trace " << plan.trace_path << "), global batch "
      << plan.global_batch << ", budget " << core::format_bytes(plan.budget_bytes) << " (margin "
      << core::format_bytes(plan.margin_bytes) << ")\n\n";

  out << "  micro-batches    " << micro_batch_shape(plan.choice.micro_batches);
  // A contrastive model's micro-batches share one loss over the whole batch (a gradient cache).
  out << (std::any_of(plan.warnings.begin(), plan.warnings.end(),
                      [](const std::string& w) { return w.rfind("contrastive step: gradient cache", 0) == 0; })
              ? "  (gradient cache: one loss over the whole batch)\n"
              : "  (loss weight b_i/B)\n");
  // A precision other than the default: every figure below holds for it (the trace's).
  if (plan.precision != core::Precision::Fp32) {
    for (const auto& entry : core::kPrecisions) {
      if (entry.id == plan.precision) out << "  precision        " << entry.name << ": " << entry.summary << "\n";
    }
  }
  if (plan.static_memory) {
    out << "  static memory    "
        << core::describe_static_memory(*plan.static_memory, plan.precision)
        << "\n";
  }
  // Each technique's lines, in the strategy table's order (planner/technique.h).
  std::vector<planner::SummaryLine> lines;
  for (const planner::Technique* technique : planner::techniques()) technique->summarize(plan.choice, lines);
  for (const auto& line : lines) {
    out << "  " << line.label << std::string(line.label.size() < 17 ? 17 - line.label.size() : 1, ' ') << line.text << "\n";
  }
  out << "  predicted peak   " << core::format_bytes(plan.predicted.peak_bytes) << " of " << core::format_bytes(allowed)
      << " allowed, at " << plan.peak_at << "\n";
  out << "  predicted speed  " << seconds(plan.predicted.step_seconds) << " s/step, "
      << rate(plan.predicted.samples_per_second) << " samples/s";
  // Whose times they are: a step runs at the threads it was profiled with (execute uses them).
  if (plan.threads > 0) out << " at " << plan.threads << " thread" << (plan.threads == 1 ? "" : "s");
  if (plan.calibration) out << ", as " << plan.calibration->device << " runs it";
  out << "\n  why              " << plan.binding_constraint << "\n";
  for (const auto& w : plan.warnings) out << "  warning          " << w << "\n";
  if (!plan.runner_ups.empty()) {
    out << "\nrunner-ups:\n";
    TextTable table({{"micro-batch"}, {"checkpointed"}, {"peak"}, {"s/step"}, {"samples/s"}});
    for (const auto& r : plan.runner_ups) {
      table.add_row({std::to_string(r.micro_batch), std::to_string(r.checkpointed_blocks),
                     core::format_bytes(r.predicted.peak_bytes), seconds(r.predicted.step_seconds),
                     rate(r.predicted.samples_per_second)});
    }
    out << table.render();
  }
  return out.str();
}

std::string render_shard_stages(const std::vector<planner::PlanOutcome::ShardStage>& stages, const core::DataParallelChoice& chosen) {
  if (stages.empty()) return {};
  std::ostringstream out;
  out << "each shard stage, planned alike (the plan is for the one marked *):\n";
  TextTable table({{"stage", TextTable::Align::Left}, {"held throughout"}, {"peak"}, {"samples/s"}, {"", TextTable::Align::Left}});
  for (const auto& row : stages) {
    const bool marked = row.stage == chosen.shard_stage && (!row.gather || *row.gather == chosen.gather);
    const std::string name = planner::shard_row_name(row) + (marked ? " *" : "");
    if (row.predicted) {
      table.add_row({name, core::format_bytes(row.static_bytes), core::format_bytes(row.predicted->peak_bytes),
                     rate(row.predicted->samples_per_second), ""});
    } else {
      table.add_row({name, core::format_bytes(row.static_bytes), "", "",
                     row.smallest_budget > 0 ? "none fits: needs a budget of " + core::format_bytes_at_least(row.smallest_budget)
                                             : "none fits"});
    }
  }
  out << table.render();
  return out.str();
}

std::string render_precision_comparison(const std::vector<planner::PrecisionPlan>& rows, core::Precision chosen) {
  double chosen_rate = 0;
  for (const auto& row : rows) {
    if (row.precision == chosen && row.plan) chosen_rate = row.plan->predicted.samples_per_second;
  }
  std::ostringstream out;
  out << "each precision the trace measured, planned alike (the plan is for the one marked *):\n";
  // Narrow enough for the desktop app's plan pane.
  TextTable table({{"precision", TextTable::Align::Left},
                   {"micro-batches", TextTable::Align::Left},
                   {"ckpt"},
                   {"B/param"},
                   {"peak"},
                   {"samples/s"},
                   {"vs *"}});
  std::vector<std::string> reasons;
  for (const auto& row : rows) {
    const std::string name = std::string(core::precision_name(row.precision)) + (row.precision == chosen ? " *" : "");
    if (!row.plan) {
      table.add_row({name, "none fits", "", "", "", "", ""});
      reasons.push_back(std::string(core::precision_name(row.precision)) + ": " + row.why_not);
      continue;
    }
    const core::Plan& plan = *row.plan;
    const std::string shape = micro_batch_shape(plan.choice.micro_batches);
    std::string per_param;
    if (plan.static_memory && plan.static_memory->parameter_elements > 0) {
      char text[32];
      std::snprintf(text, sizeof text, "%.1f", plan.static_memory->bytes_per_parameter(plan.static_memory->total_bytes()));
      per_param = text;
    }
    std::string versus;
    if (chosen_rate > 0) {
      char text[32];
      std::snprintf(text, sizeof text, "%.2fx", plan.predicted.samples_per_second / chosen_rate);
      versus = text;
    }
    table.add_row({name, shape, std::to_string(plan.choice.checkpointed_blocks.size()), per_param,
                   core::format_bytes(plan.predicted.peak_bytes), rate(plan.predicted.samples_per_second), versus});
  }
  out << table.render();
  for (const auto& reason : reasons) out << "  " << reason << "\n";
  return out.str();
}

}  // namespace headroom::report
