// Acceptance of the executor: every zoo model's committed CPU trace at three budgets below
// the whole batch's peak: plan, execute under the enforced budget, and compare.
//   ./build/default/bench/acceptance [steps] [--fresh]
// Prints a Markdown table: budget, plan, predicted and measured peak and samples/s, errors. With
// --fresh each model is profiled again (same configuration and batch sizes) right before it is
// planned and executed: on a machine whose speed drifts over minutes this separates the time
// model's error from the drift since the committed trace was recorded.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/cost_model.h"
#include "core/host_memory.h"
#include "core/units.h"
#include "executor/executor.h"
#include "models/model_source.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "profiler/profiler.h"
#include "runtime/host_info.h"
#include "support/build_paths.h"

using namespace headroom;

int main(int argc, char** argv) {
  runtime::run_with_passive_thread_pools(argv);  // as the headroom command runs torch work
  core::enter_host_memory_regime();              // and in its host-memory regime (core/host_memory.h)
  const int steps = argc > 1 ? std::atoi(argv[1]) : 5;
  const bool fresh = argc > 2 && std::string(argv[2]) == "--fresh";
  struct Case {
    const char* trace;
    std::int64_t batch;
  };
  const Case cases[] = {{"cpu-mlp.json", 256}, {"cpu-cnn.json", 128}, {"cpu-bert.json", 32}, {"cpu-gpt.json", 32}};
  std::printf("| model | batch | budget | plan | predicted peak | measured peak | peak error | within budget | predicted samples/s | measured samples/s | throughput error | gradient check |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  int failures = 0;
  for (const auto& c : cases) {
    const std::string path = std::string(HEADROOM_TRACES_DIR) + "/" + c.trace;
    core::Trace trace = core::read_trace_file(path);
    if (fresh) {
      auto model = models::build_model(trace.model, trace.profile.seed);
      profiler::ProfileOptions options;
      options.batch_sizes = trace.batch_sizes;
      options.optimizer = trace.optimizer.name;
      trace = profiler::profile(model, options);
    }
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    planner::PlanRequest request;
    request.global_batch = c.batch;
    request.trace_path = path;
    request.trace_sha256 = std::string(64, '0');
    request.budget_bytes = 1;
    const std::int64_t least = planner::plan_step(trace, request).smallest_budget;
    const std::int64_t whole =
        planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({c.batch})).peak_bytes;
    for (const double fraction : {0.1, 0.4, 0.7}) {
      request.budget_bytes = least + static_cast<std::int64_t>(fraction * static_cast<double>(whole - least));
      const auto outcome = planner::plan_step(trace, request);
      if (!outcome.plan) {
        std::printf("| %s | %lld | %s | infeasible | | | | | | | | |\n", trace.model.name.c_str(), static_cast<long long>(c.batch),
                    core::format_bytes(request.budget_bytes).c_str());
        ++failures;
        continue;
      }
      const core::Plan& plan = *outcome.plan;
      executor::ExecuteOptions options;
      options.steps = steps;
      const core::Report r = executor::execute(plan, trace, path, options);
      char plan_text[96];
      std::snprintf(plan_text, sizeof plan_text, "%zu x %lld%s, %zu ckpt", plan.choice.micro_batches.size(),
                    static_cast<long long>(plan.choice.micro_batches.front()),
                    plan.choice.micro_batches.back() != plan.choice.micro_batches.front() ? "*" : "",
                    plan.choice.checkpointed_blocks.size());
      if (r.status != "ok") {
        std::printf("| %s | %lld | %s | %s | %s | OUT OF MEMORY | | no | | | | |\n", trace.model.name.c_str(),
                    static_cast<long long>(c.batch), core::format_bytes(plan.budget_bytes).c_str(), plan_text,
                    core::format_bytes(plan.predicted.peak_bytes).c_str());
        ++failures;
        continue;
      }
      const bool within = r.measured.peak_bytes <= plan.budget_bytes;
      failures += !within || std::fabs(r.peak_rel_error) > 0.05;
      char grad[64];
      if (r.gradient_check.computed) std::snprintf(grad, sizeof grad, "%.1e", r.gradient_check.max_rel_diff);
      else std::snprintf(grad, sizeof grad, "not computed");
      std::printf("| %s | %lld | %s | %s | %s | %s | %.2f%% | %s | %.1f | %.1f | %.1f%% | %s |\n", trace.model.name.c_str(),
                  static_cast<long long>(c.batch), core::format_bytes(plan.budget_bytes).c_str(), plan_text,
                  core::format_bytes(r.predicted.peak_bytes).c_str(), core::format_bytes(r.measured.peak_bytes).c_str(),
                  100 * r.peak_rel_error, within ? "yes" : "NO", r.predicted.samples_per_second,
                  r.measured.samples_per_second, 100 * r.throughput_rel_error, grad);
      std::fflush(stdout);
    }
  }
  std::printf("\n%d case(s) outside the acceptance (over budget, out of memory, or peak error > 5%%)\n", failures);
  return failures == 0 ? 0 : 1;
}
