// Acceptance of Tempo (docs/design.md, "Tempo"), as Markdown tables:
//   ./build/default/bench/tempo_acceptance kept      bytes kept per bert-base encoder layer, seq 128 and 512
//   ./build/default/bench/tempo_acceptance batch     largest batch under fixed budgets, with and without Tempo
//   ./build/default/bench/tempo_acceptance plans     Tempo plans executed under their budgets: peak error
//   ./build/default/bench/tempo_acceptance overhead  step time of the all-Tempo step against the standard one
// Everything is measured here (allocator hook, clocks) or planned from the committed traces.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/cost_model.h"
#include "core/host_memory.h"
#include "core/units.h"
#include "executor/executor.h"
#include "models/zoo.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "profiler/profiler.h"
#include "runtime/host_info.h"
#include "runtime/memory_recorder.h"
#include "support/build_paths.h"

using namespace headroom;

namespace {

core::Trace committed(const std::string& name) {
  return core::read_trace_file(std::string(HEADROOM_TRACES_DIR) + "/" + name);
}

// Bytes kept after forward by the encoder layers (blocks), per layer, measured by the profiler's
// attribution of one forward and backward.
double kept_per_block(models::Model& model, const models::Batch& batch, bool tempo) {
  model.set_all_variants(tempo ? core::LayerVariant::Tempo : core::LayerVariant::Standard);
  auto recorder = std::make_shared<runtime::MemoryRecorder>(torch::kCPU);
  runtime::ScopedMemoryRecording recording(recorder);
  const auto step = profiler::profile_step(model, batch, *recorder, nullptr);
  std::int64_t kept = 0;
  int blocks = 0;
  for (std::size_t i = 0; i < model.layers().size(); ++i) {
    if (model.layers()[i].block < 0) continue;
    kept += step.layers[i].kept_bytes;
    blocks = std::max(blocks, model.layers()[i].block + 1);
  }
  model.set_all_variants(core::LayerVariant::Standard);
  return static_cast<double>(kept) / blocks;
}

int kept() {
  std::printf("| bert base | batch | kept per encoder layer, standard | Tempo | less | per token, standard | Tempo |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const char* seq : {"128", "512"}) {
    auto model = models::build_zoo_model("bert", {{"preset", "base"}, {"seq", seq}}, 0);
    model.set_training(true);
    const std::int64_t batch = 2;
    const auto data = model.make_batch(batch, 1);
    kept_per_block(model, data, false);  // warm the allocator's pools and lazy initialization
    const double standard = kept_per_block(model, data, false);
    const double tempo = kept_per_block(model, data, true);
    const double tokens = static_cast<double>(batch) * std::stod(seq);
    std::printf("| seq %s | %lld | %s | %s | %.1f%% | %.0f B | %.0f B |\n", seq, static_cast<long long>(batch),
                core::format_bytes(static_cast<std::int64_t>(standard)).c_str(),
                core::format_bytes(static_cast<std::int64_t>(tempo)).c_str(), 100 * (1 - tempo / standard),
                standard / tokens, tempo / tokens);
    std::fflush(stdout);
  }
  return 0;
}

planner::PlanRequest request_for(std::int64_t budget, std::int64_t batch, std::set<planner::Strategy> strategies) {
  planner::PlanRequest r;
  r.budget_bytes = budget;
  r.global_batch = batch;
  r.strategies = std::move(strategies);
  r.trace_sha256 = std::string(64, '0');
  return r;
}

// The largest single-step batch (no micro-batching) that fits `budget` with these strategies.
std::int64_t largest_batch(const core::Trace& trace, std::int64_t budget, const std::set<planner::Strategy>& strategies) {
  std::int64_t lo = 0, hi = 1;
  while (planner::plan_step(trace, request_for(budget, hi, strategies)).plan) {
    lo = hi;
    hi *= 2;
    if (hi > (1 << 20)) return lo;
  }
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (planner::plan_step(trace, request_for(budget, mid, strategies)).plan ? lo : hi) = mid;
  }
  return lo;
}

int batch() {
  std::printf("| trace | budget | largest batch, standard | with Tempo | ratio | activations per sample, standard | with Tempo |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const char* name : {"cpu-bert-large.json", "cpu-bert.json", "cpu-gpt.json"}) {
    const core::Trace trace = committed(name);
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    const core::StepChoice all = graph.all_tempo();
    const core::StepChoice none;
    // Budgets: the standard step's need at the largest sampled batch, times 1, 1.5 and 2 of the
    // part above the static state.
    const std::int64_t top = trace.batch_sizes.back();
    const std::int64_t floor = costs.static_bytes() + costs.optimizer_transient_bytes();
    const std::int64_t need = planner::predict_step(costs, graph, none.with_micro_batches({top})).peak_bytes;
    const auto per_sample = [&](const core::StepChoice& variants) {
      return static_cast<double>(planner::predict_step(costs, graph, variants.with_micro_batches({2 * top})).peak_bytes -
                                 planner::predict_step(costs, graph, variants.with_micro_batches({top})).peak_bytes) /
             static_cast<double>(top);
    };
    for (const double scale : {1.0, 2.0, 4.0}) {
      const auto budget = static_cast<std::int64_t>((static_cast<double>(floor) + scale * static_cast<double>(need - floor)) / 0.95);
      const std::int64_t standard = largest_batch(trace, budget, {});
      const std::int64_t tempo = largest_batch(trace, budget, {planner::Strategy::Tempo});
      std::printf("| %s | %s | %lld | %lld | %.2fx | %s | %s |\n", name, core::format_bytes(budget).c_str(),
                  static_cast<long long>(standard), static_cast<long long>(tempo),
                  standard > 0 ? static_cast<double>(tempo) / static_cast<double>(standard) : 0.0,
                  core::format_bytes(static_cast<std::int64_t>(per_sample(none))).c_str(),
                  core::format_bytes(static_cast<std::int64_t>(per_sample(all))).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

int plans(int steps) {
  std::printf("| trace | batch | budget | strategies | plan | Tempo layers | predicted peak | measured peak | peak error | within budget | predicted samples/s | measured samples/s | gradient check |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  int failures = 0;
  struct Case {
    const char* trace;
    std::int64_t batch;
  };
  for (const Case c : {Case{"cpu-bert.json", 32}, Case{"cpu-gpt.json", 32}}) {
    const std::string path = std::string(HEADROOM_TRACES_DIR) + "/" + c.trace;
    const core::Trace trace = committed(c.trace);
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    const core::StepChoice all = graph.all_tempo();
    const std::int64_t standard = planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({c.batch})).peak_bytes;
    const std::int64_t tempo = planner::predict_step(costs, graph, all.with_micro_batches({c.batch})).peak_bytes;
    using S = planner::Strategy;
    struct Budgeted {
      double fraction;  // of the way from the all-Tempo need to the standard need
      std::set<S> strategies;
      const char* label;
    };
    for (const Budgeted& b : {Budgeted{0.3, {S::Tempo}, "tempo"}, Budgeted{0.7, {S::Tempo}, "tempo"},
                              Budgeted{-0.3, {S::Tempo, S::MicroBatching, S::Checkpointing}, "all"}}) {
      const double limit = static_cast<double>(tempo) + b.fraction * static_cast<double>(standard - tempo);
      auto request = request_for(static_cast<std::int64_t>(limit / 0.95), c.batch, b.strategies);
      request.trace_path = path;
      const auto outcome = planner::plan_step(trace, request);
      if (!outcome.plan) {
        std::printf("| %s | %lld | %s | %s | infeasible | | | | | | | | |\n", c.trace, static_cast<long long>(c.batch),
                    core::format_bytes(request.budget_bytes).c_str(), b.label);
        ++failures;
        continue;
      }
      const core::Plan& plan = *outcome.plan;
      const int tempo_layers = plan.choice.tempo_count();
      executor::ExecuteOptions options;
      options.steps = steps;
      const core::Report r = executor::execute(plan, trace, path, options);
      char plan_text[96];
      std::snprintf(plan_text, sizeof plan_text, "%zu x %lld, %zu ckpt", plan.choice.micro_batches.size(),
                    static_cast<long long>(plan.choice.micro_batches.front()), plan.choice.checkpointed_blocks.size());
      if (r.status != "ok") {
        std::printf("| %s | %lld | %s | %s | %s | %d | %s | OUT OF MEMORY | | no | | | |\n", c.trace,
                    static_cast<long long>(c.batch), core::format_bytes(plan.budget_bytes).c_str(), b.label, plan_text,
                    tempo_layers, core::format_bytes(plan.predicted.peak_bytes).c_str());
        ++failures;
        continue;
      }
      const bool within = r.measured.peak_bytes <= plan.budget_bytes;
      failures += !within || std::fabs(r.peak_rel_error) > 0.05;
      char grad[64];
      if (r.gradient_check.computed) std::snprintf(grad, sizeof grad, "%.1e", r.gradient_check.max_rel_diff);
      else std::snprintf(grad, sizeof grad, "not computed");
      std::printf("| %s | %lld | %s | %s | %s | %d | %s | %s | %.2f%% | %s | %.1f | %.1f | %s |\n", c.trace,
                  static_cast<long long>(c.batch), core::format_bytes(plan.budget_bytes).c_str(), b.label, plan_text,
                  tempo_layers, core::format_bytes(r.predicted.peak_bytes).c_str(),
                  core::format_bytes(r.measured.peak_bytes).c_str(), 100 * r.peak_rel_error, within ? "yes" : "NO",
                  r.predicted.samples_per_second, r.measured.samples_per_second, grad);
      std::fflush(stdout);
    }
  }
  std::printf("\n%d case(s) outside the acceptance (over budget, out of memory, or peak error > 5%%)\n", failures);
  return failures == 0 ? 0 : 1;
}

// The executor's measured step time with every Tempo layer on against none, same batch, no
// budget, alternating runs so drift hits both alike.
int overhead(int steps) {
  std::printf("| trace | batch | standard s/step | all-Tempo s/step | overhead | profiled plain step, standard | all-Tempo | overhead |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const char* name : {"cpu-bert.json", "cpu-gpt.json"}) {
    const std::string path = std::string(HEADROOM_TRACES_DIR) + "/" + name;
    const core::Trace trace = committed(name);
    const std::int64_t b = trace.batch_sizes.back();
    core::Plan plan;
    plan.model = trace.model.name;
    plan.device = "cpu";
    plan.budget_bytes = 1LL << 40;
    plan.global_batch = b;
    plan.choice.micro_batches = {b};
    plan.predicted = {1, 1, 1};
    for (const auto& layer : trace.layers) plan.choice.layers.push_back({layer.id, layer.name});
    core::Plan tempo = plan;
    for (auto& layer : tempo.choice.layers) {
      if (trace.layers[static_cast<std::size_t>(layer.id)].tempo) layer.variant = core::LayerVariant::Tempo;
    }
    executor::ExecuteOptions options;
    options.steps = steps;
    options.gradient_check = false;
    options.enforce_budget = false;
    double standard_s = 0, tempo_s = 0;
    for (int round = 0; round < 3; ++round) {
      standard_s += executor::execute(plan, trace, path, options).measured.step_seconds;
      tempo_s += executor::execute(tempo, trace, path, options).measured.step_seconds;
    }
    const auto& s = trace.steps.back();
    const auto& l = trace.tempo_steps.back();
    std::printf("| %s | %lld | %.4f | %.4f | %+.1f%% | %.4f | %.4f | %+.1f%% |\n", name, static_cast<long long>(b),
                standard_s / 3, tempo_s / 3, 100 * (tempo_s / standard_s - 1), static_cast<double>(s.plain_step_ns) / 1e9,
                static_cast<double>(l.plain_step_ns) / 1e9,
                100 * (static_cast<double>(l.plain_step_ns) / static_cast<double>(s.plain_step_ns) - 1));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  runtime::run_with_passive_thread_pools(argv);  // as the headroom command runs torch work
  core::enter_host_memory_regime();              // and in its host-memory regime (core/host_memory.h)
  const std::string what = argc > 1 ? argv[1] : "";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 3;
  if (what == "kept") return kept();
  if (what == "batch") return batch();
  if (what == "plans") return plans(steps);
  if (what == "overhead") return overhead(steps);
  std::fprintf(stderr, "usage: tempo_acceptance kept|batch|plans|overhead [steps]\n");
  return 2;
}
