// An executed sweep of plan choices: for every zoo model at two sizes, many choices drawn
// at random — micro-batch splits (even and uneven), any subset of checkpointable blocks, any subset
// of Tempo layers, L2L from any block (boundaries on the device or the host), the tiled loss's tiles
// for clip — each simulated and executed without a budget. The simulated peak must bound the
// measured one: never under, at most 1% over. The worst under- and over-prediction per model are
// reported with the choice that produced them; the exit status is 1 when a choice misses. An L2L
// choice's host side (L2L's parameters, optimizer state, stash) is held to the same target.
//
//   ./build/default/bench/plan_sweep [--choices 40] [--seed 1] [--models mlp,cnn,gpt,bert,clip]
//                                    [--sizes small,large] [--steps 2]
// ctest runs a small fixed-seed subset (tests/CMakeLists.txt: PlanSweep.*).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/host_memory.h"
#include "executor/executor.h"
#include "models/zoo.h"
#include "planner/infcl_model.h"
#include "planner/l2l_model.h"
#include "planner/layer_graph.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "planner/technique.h"
#include "profiler/profiler.h"
#include "runtime/host_info.h"
#include "simulator/simulator.h"

using namespace headroom;
using Clock = std::chrono::steady_clock;

namespace {

struct ModelCase {
  std::string model;
  std::string size;  // "small" or "large"
  std::map<std::string, std::string> config;
  std::vector<std::int64_t> profile_batches;
  std::int64_t global_batch = 0;
};

// Two sizes of every zoo model, small enough that a choice runs in about a second on two cores,
// profiled up to the global batch (past the largest profiled size a plan extrapolates, and says so).
std::vector<ModelCase> model_cases() {
  return {
      {"mlp", "small", {{"hidden", "128"}, {"depth", "3"}}, {1, 2, 4, 8, 16}, 16},
      {"mlp", "large", {{"hidden", "512"}, {"depth", "6"}}, {1, 2, 4, 8, 16}, 16},
      {"cnn", "small", {{"width", "8"}}, {1, 2, 4, 8, 16}, 16},
      {"cnn", "large", {{"width", "16"}, {"blocks", "2"}}, {1, 2, 4, 8, 16}, 16},
      {"gpt", "small", {{"preset", "tiny"}, {"seq", "32"}, {"vocab", "512"}}, {1, 2, 4, 8, 16}, 16},
      {"gpt", "large", {{"preset", "tiny"}, {"layers", "4"}, {"seq", "64"}, {"vocab", "1024"}}, {1, 2, 4, 8, 16}, 16},
      {"bert", "small", {{"preset", "tiny"}, {"seq", "32"}, {"vocab", "512"}}, {1, 2, 4, 8, 16}, 16},
      {"bert", "large", {{"preset", "tiny"}, {"layers", "4"}, {"seq", "64"}, {"vocab", "1024"}}, {1, 2, 4, 8, 16}, 16},
      {"clip", "small", {}, {8, 16, 32, 64}, 64},
      {"clip", "large", {{"layers", "2"}, {"width", "16"}}, {8, 16, 32, 64}, 64},
  };
}

struct Options {
  int choices = 40;
  unsigned seed = 1;
  std::set<std::string> models{"mlp", "cnn", "gpt", "bert", "clip"};
  std::set<std::string> sizes{"small", "large"};
  int steps = 2;
};

std::set<std::string> split_list(const std::string& text) {
  std::set<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.insert(item);
  }
  return out;
}

[[noreturn]] void usage(const char* problem) {
  if (problem != nullptr) std::fprintf(stderr, "plan_sweep: %s\n", problem);
  std::fprintf(problem != nullptr ? stderr : stdout,
               "usage: plan_sweep [--choices N] [--seed S] [--models mlp,cnn,gpt,bert,clip] [--sizes small,large] "
               "[--steps N]\n");
  std::exit(problem != nullptr ? 2 : 0);
}

Options parse(int argc, char** argv) {
  Options o;
  const auto number = [&](int& i, const char* flag) {
    if (i + 1 >= argc) usage((std::string(flag) + " needs a value").c_str());
    char* end = nullptr;
    const long v = std::strtol(argv[++i], &end, 10);
    if (*end != '\0' || v < 1 || v > 100000) usage((std::string(flag) + ": not a count from 1 to 100000: " + argv[i]).c_str());
    return static_cast<int>(v);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage(nullptr);
    if (a == "--choices") {
      o.choices = number(i, "--choices");
    } else if (a == "--seed") {
      o.seed = static_cast<unsigned>(number(i, "--seed"));
    } else if (a == "--steps") {
      o.steps = number(i, "--steps");
    } else if (a == "--models" || a == "--sizes") {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      (a == "--models" ? o.models : o.sizes) = split_list(argv[++i]);
    } else {
      usage(("unknown flag " + a).c_str());
    }
  }
  for (const auto& m : o.models) {
    if (m != "mlp" && m != "cnn" && m != "gpt" && m != "bert" && m != "clip") usage(("--models: unknown model " + m).c_str());
  }
  for (const auto& s : o.sizes) {
    if (s != "small" && s != "large") usage(("--sizes: unknown size " + s + " (small, large)").c_str());
  }
  return o;
}

// `count` micro-batches summing to `batch`: as even as possible, or cut at random points.
std::vector<std::int64_t> draw_split(std::mt19937& rng, std::int64_t batch, std::int64_t count, bool even) {
  if (even) return planner::split_batch(batch, count);
  std::vector<std::int64_t> cuts;
  for (std::int64_t i = 1; i < batch; ++i) cuts.push_back(i);
  std::shuffle(cuts.begin(), cuts.end(), rng);
  cuts.resize(static_cast<std::size_t>(count - 1));
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::int64_t> sizes;
  std::int64_t at = 0;
  for (const auto c : cuts) {
    sizes.push_back(c - at);
    at = c;
  }
  sizes.push_back(batch - at);
  return sizes;
}

bool coin(std::mt19937& rng, double p = 0.5) { return std::bernoulli_distribution(p)(rng); }

std::string describe(const core::StepChoice& c) {
  std::string out = "micro-batches [";
  for (std::size_t i = 0; i < c.micro_batches.size(); ++i) out += (i ? "," : "") + std::to_string(c.micro_batches[i]);
  out += "]";
  if (c.l2l) {
    out += ", L2L " + (c.l2l->whole_model() ? std::string("whole model") : "from block " + std::to_string(c.l2l->from_block)) +
           ", boundaries on the " + (c.l2l->boundaries_on_host ? "host" : "device");
    return out;
  }
  out += ", checkpointed [";
  for (std::size_t i = 0; i < c.checkpointed_blocks.size(); ++i) out += (i ? "," : "") + std::to_string(c.checkpointed_blocks[i]);
  out += "], tempo [";
  bool first = true;
  for (const auto& l : c.layers) {
    if (l.variant == core::LayerVariant::Standard) continue;
    out += (first ? "" : ",") + l.name;
    first = false;
  }
  out += "]";
  if (c.loss_tiles) out += ", loss tiles " + std::to_string(c.loss_tiles->rows) + "x" + std::to_string(c.loss_tiles->cols);
  return out;
}

struct Miss {
  double error = 0;  // (simulated - measured) / measured
  std::string choice;
  std::int64_t simulated = 0, measured = 0;
};

struct Extremes {
  bool any = false;
  Miss under, over;  // the lowest and the highest error
};

struct CaseResult {
  int run = 0, refused = 0, failed = 0, l2l_runs = 0;
  Extremes device, host;  // host: L2L's host side
  double seconds = 0;
};

// Draws one choice for the trace; the layer list is the plan's full form.
core::StepChoice draw_choice(std::mt19937& rng, const core::Trace& trace, const planner::LayerGraph& graph,
                             std::int64_t global_batch, const std::vector<core::LossTiles>& tiles) {
  core::StepChoice choice;
  const bool use_l2l = planner::l2l_can_run(trace) && coin(rng, 0.25);
  const std::int64_t most = use_l2l ? std::min<std::int64_t>(global_batch, planner::kMaxL2LMicroBatches) : global_batch;
  const std::int64_t count = std::uniform_int_distribution<std::int64_t>(1, std::min<std::int64_t>(most, 8))(rng);
  choice.micro_batches = draw_split(rng, global_batch, count, coin(rng));
  if (use_l2l) {
    core::L2LChoice r;
    r.boundaries_on_host = coin(rng);
    if (coin(rng)) {
      const auto stages = planner::l2l_stage_costs(trace);
      std::vector<int> blocks;
      for (const auto& s : stages) {
        const int b = trace.layers[static_cast<std::size_t>(s.first)].block;
        if (b >= 0) blocks.push_back(b);
      }
      if (!blocks.empty()) r.from_block = blocks[std::uniform_int_distribution<std::size_t>(0, blocks.size() - 1)(rng)];
    }
    choice.l2l = r;
  } else {
    for (const auto& span : graph.blocks()) {
      if (span.checkpointable && coin(rng)) choice.checkpointed_blocks.push_back(span.block);
    }
    for (const int layer : graph.tempo_candidates()) {
      if (coin(rng)) choice.set_variant(layer, core::LayerVariant::Tempo);
    }
    std::vector<core::LossTiles> fitting;
    for (const auto& t : tiles) {
      if (t.rows <= global_batch && t.cols <= global_batch) fitting.push_back(t);
    }
    if (!fitting.empty() && coin(rng)) choice.loss_tiles = fitting[std::uniform_int_distribution<std::size_t>(0, fitting.size() - 1)(rng)];
  }
  return planner::complete_choice(trace, graph, choice);
}

void consider(Extremes& r, const Miss& m) {
  if (!r.any || m.error < r.under.error) r.under = m;
  if (!r.any || m.error > r.over.error) r.over = m;
  r.any = true;
}

bool missed(const Extremes& e) { return e.any && (e.under.error < 0 || e.over.error > 0.01); }

std::string range(const Extremes& e) {
  if (!e.any) return "-";
  char text[64];
  std::snprintf(text, sizeof text, "%+.3f%% .. %+.3f%%", 100 * e.under.error, 100 * e.over.error);
  return text;
}

CaseResult sweep(const ModelCase& mc, const Options& options, std::mt19937& rng) {
  CaseResult result;
  const auto start = Clock::now();
  models::Model model = models::build_zoo_model(mc.model, mc.config, 0);
  profiler::ProfileOptions profile;
  profile.batch_sizes = mc.profile_batches;
  profile.repeats = 1;
  const core::Trace trace = profiler::profile(model, profile);
  const planner::LayerGraph graph(trace);
  std::vector<core::LossTiles> tiles;
  if (const auto loss = planner::contrastive_loss_model(trace)) tiles = loss->tiles();

  // The plan document around the drawn choices: the plain full batch at a budget nothing reaches.
  planner::PlanRequest request;
  request.global_batch = mc.global_batch;
  request.budget_bytes = std::int64_t{1} << 40;
  request.margin_fraction = 0;
  request.strategies = {};
  const auto outcome = planner::plan_step(trace, request);
  if (!outcome.plan) throw std::runtime_error(mc.model + ": no plain plan: " + outcome.reason);

  for (int k = 0; k < options.choices; ++k) {
    core::Plan plan = *outcome.plan;
    plan.choice = draw_choice(rng, trace, graph, mc.global_batch, tiles);
    const std::string what = describe(plan.choice);
    try {
      planner::check_choice(plan, trace, "sweep");
    } catch (const core::InputError& e) {
      ++result.refused;
      std::printf("  refused: %s: %s\n", what.c_str(), e.what());
      continue;
    }
    const core::CostModel costs(trace);
    const auto predicted = planner::predict_step(costs, graph, plan.choice);
    plan.predicted.peak_bytes = predicted.peak_bytes;
    plan.predicted.step_seconds = static_cast<double>(predicted.step_ns) / 1e9;
    plan.predicted.samples_per_second = static_cast<double>(plan.choice.samples()) / plan.predicted.step_seconds;
    plan.predicted_parts = planner::predicted_parts({trace, costs, graph, request, plan.choice});
    const auto simulated = simulator::simulate(planner::plan_schedule(trace, plan, "sweep"), {false});

    executor::ExecuteOptions run;
    run.steps = options.steps;
    run.enforce_budget = false;
    run.gradient_check = false;
    const core::Report report = executor::execute(plan, trace, "sweep", run);
    if (report.status != "ok") {
      ++result.failed;
      std::printf("  failed: %s: %s\n", what.c_str(), report.status.c_str());
      continue;
    }
    ++result.run;
    const auto measured = report.measured.peak_bytes;
    const double error = static_cast<double>(simulated.peak_bytes - measured) / static_cast<double>(measured);
    consider(result.device, {error, what, simulated.peak_bytes, measured});
    if (error < 0 || error > 0.01) {
      std::printf("  miss %+.3f%%: simulated %lld, measured %lld: %s\n", 100 * error, static_cast<long long>(simulated.peak_bytes),
                  static_cast<long long>(measured), what.c_str());
    }
    if (report.l2l) {
      // L2L's host side is a bound like the device's.
      const auto host = report.l2l->predicted_host_bytes;
      const auto held = report.l2l->measured_host_peak_bytes;
      const double host_error = static_cast<double>(host - held) / static_cast<double>(held);
      ++result.l2l_runs;
      consider(result.host, {host_error, what, host, held});
      if (host_error < 0 || host_error > 0.01) {
        std::printf("  miss %+.3f%% on the host: predicted %lld, measured %lld: %s\n", 100 * host_error, static_cast<long long>(host),
                    static_cast<long long>(held), what.c_str());
      }
    }
    if (simulated.peak_bytes != predicted.peak_bytes) {
      std::printf("  note: simulated %lld, predicted %lld: %s\n", static_cast<long long>(simulated.peak_bytes),
                  static_cast<long long>(predicted.peak_bytes), what.c_str());
    }
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  runtime::run_with_passive_thread_pools(argv);  // as the headroom command runs torch work
  core::enter_host_memory_regime();              // and in its host-memory regime (core/host_memory.h)
  const Options options = parse(argc, argv);
  std::mt19937 rng(options.seed);
  bool missed_any = false;
  int total = 0;
  const auto start = Clock::now();
  std::printf("| model | size | choices run | refused | device peak error, lowest .. highest | L2L choices | L2L host peak error | seconds |\n"
              "|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> details;
  for (const auto& mc : model_cases()) {
    if (!options.models.contains(mc.model) || !options.sizes.contains(mc.size)) continue;
    std::fprintf(stderr, "plan_sweep: %s %s: profiling, then %d choices\n", mc.model.c_str(), mc.size.c_str(), options.choices);
    CaseResult r;
    try {
      r = sweep(mc, options, rng);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "plan_sweep: %s %s: %s\n", mc.model.c_str(), mc.size.c_str(), e.what());
      return 1;
    }
    total += r.run;
    missed_any = missed_any || missed(r.device) || missed(r.host) || r.failed > 0 || r.run == 0;
    std::printf("| %s | %s | %d | %d | %s | %d | %s | %.0f |\n", mc.model.c_str(), mc.size.c_str(), r.run, r.refused,
                range(r.device).c_str(), r.l2l_runs, range(r.host).c_str(), r.seconds);
    std::fflush(stdout);
    for (const auto* e : {&r.device, &r.host}) {
      if (!e->any) continue;
      details.push_back(mc.model + " " + mc.size + (e == &r.host ? " (L2L host side)" : "") + ": lowest " +
                        std::to_string(100 * e->under.error) + "% (" + e->under.choice + "), highest " +
                        std::to_string(100 * e->over.error) + "% (" + e->over.choice + ")");
    }
  }
  for (const auto& d : details) std::printf("%s\n", d.c_str());
  std::printf("%d choices executed in %.0f s; target: none under, none more than 1%% over: %s\n", total,
              std::chrono::duration<double>(Clock::now() - start).count(), missed_any ? "MISSED" : "met");
  return missed_any ? 1 : 0;
}
