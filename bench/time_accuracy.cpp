// How well a plan's time holds on the machine that profiled it: every zoo model at two sizes,
// profiled afresh here (the default threads: the cores this process may use) at sizes up to the
// whole batch, as `plan` tells a user to (a micro-batch past the largest profiled size has its time
// extrapolated, with a warning, and that is not what this checks), planned at two
// budgets between its least and its whole batch's need, each plan executed twice. Prints one
// Markdown row per run: predicted and measured samples/s, the signed throughput error (above 0:
// predicted too fast), the run's own step-to-step spread and how much the machine's calibration
// moved from before to after the run, so a run on a busy machine reads as such.
//   ./build/default/bench/time_accuracy [steps] [model...]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/host_memory.h"
#include "core/rescale.h"
#include "core/statistics.h"
#include "core/units.h"
#include "executor/executor.h"
#include "models/zoo.h"
#include "planner/plan_for_machine.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "profiler/profiler.h"
#include "runtime/host_info.h"

using namespace headroom;

namespace {

struct Size {
  const char* label;
  std::map<std::string, std::string> settings;
  std::vector<std::int64_t> batch_sizes;
  std::int64_t batch;
};

struct Zoo {
  const char* model;
  std::vector<Size> sizes;
};

const std::vector<Zoo>& zoo() {
  static const std::vector<Zoo> models = {
      {"mlp", {{"depth 4", {}, {4, 8, 16, 32, 64}, 128}, {"depth 8, hidden 1024", {{"depth", "8"}, {"hidden", "1024"}}, {4, 8, 16, 32}, 64}}},
      {"cnn", {{"width 16", {}, {4, 8, 16, 32, 64}, 128}, {"width 32, 2 blocks", {{"width", "32"}, {"blocks", "2"}}, {4, 8, 16, 32}, 64}}},
      {"bert", {{"tiny", {{"preset", "tiny"}}, {2, 4, 8, 16}, 32}, {"mini", {{"preset", "mini"}}, {2, 4, 8, 16}, 32}}},
      {"gpt", {{"tiny", {{"preset", "tiny"}}, {2, 4, 8, 16}, 32}, {"mini", {{"preset", "mini"}}, {2, 4, 8, 16}, 32}}},
      {"clip", {{"default", {}, {64, 128, 256, 512}, 1024}, {"image 32", {{"image", "32"}}, {64, 128, 256}, 512}}},
  };
  return models;
}

}  // namespace

int main(int argc, char** argv) {
  runtime::run_with_passive_thread_pools(argv);  // as the headroom command runs torch work
  core::enter_host_memory_regime();              // and in its host-memory regime (core/host_memory.h)
  const int steps = argc > 1 ? std::atoi(argv[1]) : 5;
  std::vector<std::string> only;
  for (int i = 2; i < argc; ++i) only.emplace_back(argv[i]);
  std::printf("| model | size | budget | plan | predicted samples/s | measured samples/s | error (signed) | step spread | machine moved |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::vector<double> errors;
  for (const Zoo& z : zoo()) {
    if (!only.empty() && std::find(only.begin(), only.end(), z.model) == only.end()) continue;
    for (const Size& size : z.sizes) {
      models::Model model = models::build_zoo_model(z.model, size.settings, 0);
      profiler::ProfileOptions options;
      options.batch_sizes = size.batch_sizes;
      options.batch_sizes.push_back(size.batch);
      options.repeats = 3;
      const core::Trace trace = profiler::profile(model, options);
      const core::CostModel costs(trace);
      const planner::LayerGraph graph(trace);
      planner::PlanRequest request;
      request.global_batch = size.batch;
      request.trace_path = "fresh";
      request.trace_sha256 = std::string(64, '0');
      request.budget_bytes = 1;
      const std::int64_t least = planner::plan_step(trace, request).smallest_budget;
      const std::int64_t whole = planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({size.batch})).peak_bytes;
      for (const double fraction : {0.2, 0.7}) {
        request.budget_bytes = least + static_cast<std::int64_t>(fraction * static_cast<double>(whole - least));
        const auto outcome = planner::plan_for_machine(trace, request, {trace.calibration, "", core::headroom_regime()});
        if (!outcome.plan) continue;
        const core::Plan& plan = *outcome.plan;
        const auto& mb = plan.choice.micro_batches;
        const std::string shape = std::to_string(mb.size()) + "x" + std::to_string(mb.front()) +
                                  (plan.choice.checkpointed_blocks.empty() ? "" : ", " + std::to_string(plan.choice.checkpointed_blocks.size()) + " ckpt");
        for (int run = 0; run < 2; ++run) {
          executor::ExecuteOptions run_options;
          run_options.steps = steps;
          run_options.gradient_check = false;
          core::Report r = executor::execute(plan, trace, "fresh", run_options);
          core::predict_for_the_run(plan, r);  // as `headroom execute` reports it
          if (r.status != "ok") {
            std::printf("| %s | %s | %s | %s | out of memory | | | | |\n", z.model, size.label,
                        core::format_bytes(plan.budget_bytes).c_str(), shape.c_str());
            continue;
          }
          const double moved = r.calibration_before && r.calibration_after
                                   ? std::max(std::fabs(r.calibration_after->compute() / r.calibration_before->compute() - 1),
                                              std::fabs(r.calibration_after->memory() / r.calibration_before->memory() - 1))
                                   : 0.0;
          const double spread = core::relative_spread(r.step_seconds);
          std::printf("| %s | %s | %s | %s | %.2f | %.2f | %+.1f%% | %.1f%% | %.1f%% |\n", z.model, size.label,
                      core::format_bytes(plan.budget_bytes).c_str(), shape.c_str(), r.predicted.samples_per_second,
                      r.measured.samples_per_second, 100 * r.throughput_rel_error, 100 * spread, 100 * moved);
          std::fflush(stdout);
          if (spread < 0.05) errors.push_back(r.throughput_rel_error);
        }
      }
    }
  }
  if (!errors.empty()) {
    std::vector<double> magnitudes;
    for (const double e : errors) magnitudes.push_back(std::fabs(e));
    std::printf("\n%zu runs with a step spread under 5%%: median |error| %.1f%%, largest %.1f%%\n", errors.size(),
                100 * core::median(magnitudes), 100 * *std::max_element(magnitudes.begin(), magnitudes.end()));
  }
  return 0;
}
