#include "cli/execute_commands.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli/plan_report.h"
#include "cli/text_table.h"
#include "core/cost_model.h"
#include "core/errors.h"
#include "core/plan.h"
#include "core/sha256.h"
#include "core/atomic_file.h"
#include "core/units.h"
#include "executor/executor.h"
#include "models/zoo.h"
#include "planner/micro_batch_model.h"
#include "planner/plan_search.h"
#include "profiler/profiler.h"

namespace headroom::cli {

namespace {

std::string percent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f%%", 100 * fraction);
  return buffer;
}

std::string fixed(double v, const char* format) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, format, v);
  return buffer;
}

void progress_line(const std::string& what) {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  std::fprintf(stderr, tty ? "\rexecuting: %-30s" : "executing: %s\n", what.c_str());
  std::fflush(stderr);
}

void end_progress() {
  if (::isatty(STDERR_FILENO) != 0) std::fprintf(stderr, "\n");
}

std::string describe_oom(const core::OutOfMemory& o) {
  std::ostringstream out;
  out << "out of memory under the " << core::format_bytes(o.budget_bytes) << " budget";
  if (!o.phase.empty()) out << " in " << o.phase;
  if (!o.layer.empty()) out << " of " << o.layer;
  if (o.micro_batch >= 0) out << " (micro-batch " << o.micro_batch << ")";
  out << ": " << core::format_bytes(o.requested_bytes) << " requested with " << core::format_bytes(o.in_use_bytes)
      << " in use";
  return out.str();
}

}  // namespace

std::string render_report(const core::Report& r) {
  std::ostringstream out;
  out << r.model << " on " << r.device_name << ": global batch " << r.global_batch << " as " << r.micro_batches.size()
      << " micro-batch" << (r.micro_batches.size() > 1 ? "es" : "") << ", " << r.checkpointed_blocks.size()
      << " checkpointed block" << (r.checkpointed_blocks.size() == 1 ? "" : "s") << ", budget "
      << (r.budget_bytes > 0 ? core::format_bytes(r.budget_bytes) + " enforced" : std::string("not enforced")) << "\n\n";
  if (r.status == "out_of_memory" && r.out_of_memory) {
    out << describe_oom(*r.out_of_memory) << "\n";
    return out.str();
  }
  TextTable table({{"", TextTable::Align::Left}, {"predicted"}, {"measured"}, {"error"}});
  table.add_row({"peak memory", core::format_bytes(r.predicted.peak_bytes), core::format_bytes(r.measured.peak_bytes),
                 percent(r.peak_rel_error)});
  table.add_row({"step time (s)", fixed(r.predicted.step_seconds, "%.4f"), fixed(r.measured.step_seconds, "%.4f"),
                 percent(std::fabs(r.predicted.step_seconds - r.measured.step_seconds) / r.measured.step_seconds)});
  table.add_row({"samples/s", fixed(r.predicted.samples_per_second, "%.2f"), fixed(r.measured.samples_per_second, "%.2f"),
                 percent(r.throughput_rel_error)});
  out << table.render();
  out << "\nmedian of " << r.steps << " measured steps";
  if (r.budget_bytes > 0) out << "; measured peak " << (r.measured.peak_bytes <= r.budget_bytes ? "within" : "OVER") << " the budget";
  out << "\ngradient check: ";
  if (r.gradient_check.computed) {
    out << "max relative difference " << fixed(r.gradient_check.max_rel_diff, "%.2e") << " (" << r.gradient_check.note << ")\n";
  } else {
    out << r.gradient_check.note << "\n";
  }
  if (r.test_accuracy) out << "test accuracy on " << r.data << " after training: " << fixed(100 * *r.test_accuracy, "%.1f") << "%\n";
  for (const auto& w : r.warnings) out << "warning: " << w << "\n";
  return out.str();
}

int run_execute(const ExecuteArgs& args) {
  const core::Plan plan = core::read_plan_file(args.plan);
  const core::Trace trace = core::load_plan_trace(plan, args.plan);
  executor::ExecuteOptions options;
  options.steps = args.steps;
  options.warmup_steps = args.warmup;
  options.device = args.device;
  options.enforce_budget = !args.no_budget;
  options.data = args.data;
  options.batchnorm_eval = args.batchnorm_eval;
  options.on_progress = progress_line;
  const core::Report report = executor::execute(plan, trace, args.plan, options);
  end_progress();
  if (!args.output.empty()) core::write_report_file(args.output, report);
  std::cout << render_report(report);
  if (report.status != "ok") {
    std::cerr << "headroom: " << describe_oom(*report.out_of_memory) << "\n";
    return 1;
  }
  return 0;
}

int run_demo(const DemoArgs& args) {
  namespace fs = std::filesystem;
  std::string directory = args.directory;
  if (directory.empty()) {
    std::string pattern = (fs::temp_directory_path() / "headroom-demo-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot make a temporary directory");
    directory = pattern;
  }
  fs::create_directories(directory);
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t batch = 32;

  std::cout << "1. profile: bert tiny (2 encoder layers, hidden 128, seq 128) on the CPU\n";
  models::Model model = models::build_zoo_model("bert", {{"preset", "tiny"}}, 0);
  profiler::ProfileOptions profile_options;
  // Up to the global batch, so whatever micro-batch the plan picks has a measured time.
  profile_options.batch_sizes = {1, 2, 4, 8, 16, 32};
  const core::Trace trace = profiler::profile(model, profile_options);
  const std::string trace_path = directory + "/trace.json";
  core::write_trace_file(trace_path, trace);
  std::cout << "   " << trace.layers.size() << " layers, " << core::format_bytes(trace.param_bytes())
            << " of parameters; trace in " << trace_path << "\n\n";

  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  planner::PlanRequest request;
  request.global_batch = batch;
  request.trace_path = trace_path;
  request.trace_sha256 = core::sha256_hex(core::read_file(trace_path));
  request.budget_bytes = 1;
  const std::int64_t least = planner::plan_step(trace, request).smallest_budget;
  const auto whole = planner::predict_step(costs, graph, {batch}, std::vector<bool>(graph.blocks().size(), false));
  // Well below what the whole batch needs, comfortably above the least any plan needs.
  request.budget_bytes = (least + (whole.peak_bytes - least) * 3 / 10) / (1 << 20) * (1 << 20);
  std::cout << "2. budget: " << core::format_bytes(request.budget_bytes) << " for a batch of " << batch
            << "; the whole batch needs " << core::format_bytes(whole.peak_bytes) << "\n";

  core::Plan whole_plan;
  whole_plan.trace_path = trace_path;
  whole_plan.trace_sha256 = request.trace_sha256;
  whole_plan.model = trace.model.name;
  whole_plan.device = "cpu";
  whole_plan.budget_bytes = request.budget_bytes;
  whole_plan.global_batch = batch;
  whole_plan.micro_batches = {batch};
  whole_plan.predicted = {whole.peak_bytes, static_cast<double>(whole.step_ns) / 1e9,
                          static_cast<double>(batch) * 1e9 / static_cast<double>(whole.step_ns)};
  executor::ExecuteOptions attempt;
  attempt.steps = 1;
  attempt.warmup_steps = 0;
  attempt.gradient_check = false;
  const core::Report refused = executor::execute(whole_plan, trace, "(whole batch)", attempt);
  if (refused.out_of_memory) {
    std::cout << "   the whole batch under this budget: " << describe_oom(*refused.out_of_memory) << "\n\n";
  } else {
    std::cout << "   the whole batch under this budget ran (measured peak " << core::format_bytes(refused.measured.peak_bytes)
              << "): the budget did not bind\n\n";
  }

  std::cout << "3. plan\n";
  const auto outcome = planner::plan_step(trace, request);
  if (!outcome.plan) {
    std::cerr << "headroom: infeasible: " << outcome.reason << "\n";
    return 3;
  }
  const std::string plan_path = directory + "/plan.json";
  core::write_plan_file(plan_path, *outcome.plan);
  std::cout << render_plan_summary(*outcome.plan) << "\n";

  std::cout << "4. execute the plan under the budget\n";
  executor::ExecuteOptions options;
  options.steps = 5;
  options.on_progress = progress_line;
  const core::Report report = executor::execute(*outcome.plan, trace, plan_path, options);
  end_progress();
  core::write_report_file(directory + "/report.json", report);
  std::cout << render_report(report);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "\nfiles in " << directory << " (trace.json, plan.json, report.json); demo took "
            << fixed(seconds, "%.1f") << " s\n";
  return report.status == "ok" ? 0 : 1;
}

}  // namespace headroom::cli
