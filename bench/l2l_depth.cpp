// L2L's device-side peak against depth: bert at 4, 8, 16 and 32 encoder blocks, one
// optimizer step of four micro-batches, under ordinary training and under L2L (boundaries
// stashed on the device, and on the host: L2L's constant-memory variant). On the CPU the device
// side is what the counting allocator counts outside host scopes; the host side (parameters,
// gradients, optimizer state of L2L) is reported beside it. Then a model whose parameters
// alone exceed a budget trains under that budget with L2L.
//
//   ./build/default/bench/l2l_depth [--hidden 64] [--seq 32] [--micro 4] [--micro-batches 4]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <map>
#include <string>
#include <utility>

#include "core/host_memory.h"
#include "core/units.h"
#include "executor/l2l_runner.h"
#include "executor/plan_runner.h"
#include "models/zoo.h"
#include "planner/l2l_model.h"
#include "profiler/profiler.h"
#include "runtime/budget_allocator.h"
#include "runtime/optimizer.h"
#include "runtime/host_info.h"

using namespace headroom;
using Clock = std::chrono::steady_clock;

namespace {

struct Settings {
  int hidden = 64, seq = 32, micro = 4, micro_batches = 4;
};

std::map<std::string, std::string> bert_config(const Settings& s, int layers) {
  return {{"preset", "tiny"},
          {"layers", std::to_string(layers)},
          {"hidden", std::to_string(s.hidden)},
          {"heads", "2"},
          {"ffn", std::to_string(4 * s.hidden)},
          {"seq", std::to_string(s.seq)},
          {"vocab", "256"}};
}

struct Measured {
  std::int64_t device_peak = 0;  // above the level before the model was built
  std::int64_t host_peak = 0;
  double step_seconds = 0;
};

std::vector<std::int64_t> sizes(const Settings& s) { return std::vector<std::int64_t>(static_cast<std::size_t>(s.micro_batches), s.micro); }

// Two steps (the first allocates the optimizer state); the second one's peak and time.
Measured ordinary(const Settings& s, int layers) {
  auto& allocator = runtime::BudgetAllocator::instance();
  const std::int64_t base = allocator.in_use();
  models::Model model = models::build_zoo_model("bert", bert_config(s, layers), 3);
  model.set_training(true);
  auto optimizer = runtime::make_optimizer("adam", model.parameters());
  executor::Position position;
  executor::PlanRunner runner(model, {}, position);
  Measured m;
  for (int step = 0; step < 2; ++step) {
    const auto batches = executor::make_micro_batches(model, sizes(s), 5 + step, torch::kCPU);
    allocator.reset_peak();
    const auto start = Clock::now();
    optimizer->zero_grad();
    runner.accumulate(batches, s.micro * s.micro_batches);
    optimizer->step();
    m.step_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    m.device_peak = allocator.peak() - base;
  }
  return m;
}

// bert built in host scope (its parameters host-side, as L2L keeps them), in training mode.
std::optional<models::Model> host_built_bert(const Settings& s, int layers) {
  std::optional<models::Model> model;
  {
    runtime::HostScope host;
    model.emplace(models::build_zoo_model("bert", bert_config(s, layers), 3));
  }
  model->set_training(true);
  return model;
}

Measured measure_l2l(const Settings& s, int layers, bool boundaries_on_host, std::optional<std::int64_t> budget = {}) {
  auto& allocator = runtime::BudgetAllocator::instance();
  const std::int64_t base = allocator.in_use(), host_base = allocator.host_in_use();
  std::optional<models::Model> model = host_built_bert(s, layers);
  executor::Position position;
  executor::L2LOptions options;
  options.boundaries_on_host = boundaries_on_host;
  // Each stage's compute starts once the next one's copy has landed: the peak the planner predicts
  // (two stages' parameters), not whichever a racing copy thread happens to give.
  options.settle_prefetch = true;
  executor::L2LRunner l2l(*model, options, position);
  Measured m;
  allocator.reset_host_peak();
  for (int step = 0; step < 2; ++step) {
    std::optional<runtime::ScopedBudget> scoped;
    if (budget) scoped.emplace(*budget);
    const auto batches = executor::make_micro_batches(*model, sizes(s), 5 + step, torch::kCPU);
    allocator.reset_peak();
    const auto start = Clock::now();
    l2l.step(batches, s.micro * s.micro_batches);
    m.step_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    m.device_peak = allocator.peak() - base;
  }
  m.host_peak = allocator.host_peak() - host_base;
  return m;
}

// Median step time of L2L (boundaries on the host, host optimizer overlapping, each stage
// waiting for the next one's copy as `headroom execute` runs it) with parameter copies held to
// `bytes_per_second`.
double throttled_step_seconds(const Settings& s, int layers, double bytes_per_second) {
  std::optional<models::Model> model = host_built_bert(s, layers);
  executor::Position position;
  executor::L2LOptions options;
  options.boundaries_on_host = true;
  options.settle_prefetch = true;
  options.copy_bytes_per_second = bytes_per_second;
  executor::L2LRunner l2l(*model, options, position);
  std::vector<double> times;
  for (int step = 0; step < 4; ++step) {
    const auto batches = executor::make_micro_batches(*model, sizes(s), 5 + step, torch::kCPU);
    const auto start = Clock::now();
    l2l.step(batches, s.micro * s.micro_batches);
    if (step > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// A trace profiled at 1, 2, 4 (and the micro-batch size, when larger).
core::Trace profiled(const Settings& s, int layers, int repeats) {
  auto model = models::build_zoo_model("bert", bert_config(s, layers), 3);
  profiler::ProfileOptions options;
  options.batch_sizes = {1, 2, 4};
  if (s.micro > 4) options.batch_sizes.push_back(s.micro);
  options.repeats = repeats;
  options.tempo = false;
  return profiler::profile(model, options);
}

// The planner's prediction of L2L's device-side peak.
std::pair<std::int64_t, std::int64_t> predicted(const Settings& s, int layers) {
  const core::Trace trace = profiled(s, layers, 1);
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  return {planner::predict_l2l_step(costs, graph, sizes(s), core::L2LChoice{false}).device_peak_bytes,
          planner::predict_l2l_step(costs, graph, sizes(s), core::L2LChoice{true}).device_peak_bytes};
}

double error(std::int64_t predicted, std::int64_t measured) {
  return 100.0 * static_cast<double>(predicted - measured) / static_cast<double>(measured);
}

int parse(const char* flag, const char* value, int low, int high) {
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < low || v > high) {
    std::fprintf(stderr, "%s: expected an integer from %d to %d, got '%s'\n", flag, low, high, value);
    std::exit(2);
  }
  return static_cast<int>(v);
}

// False, with the usage on stderr, when a flag is unknown (a value out of range exits in parse).
bool parse_settings(int argc, char** argv, Settings& s) {
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--hidden") == 0 && has_value) {
      s.hidden = parse("--hidden", argv[++i], 2, 1024);
    } else if (std::strcmp(argv[i], "--seq") == 0 && has_value) {
      s.seq = parse("--seq", argv[++i], 1, 1024);
    } else if (std::strcmp(argv[i], "--micro") == 0 && has_value) {
      s.micro = parse("--micro", argv[++i], 1, 256);
    } else if (std::strcmp(argv[i], "--micro-batches") == 0 && has_value) {
      s.micro_batches = parse("--micro-batches", argv[++i], 1, 64);
    } else {
      std::fprintf(stderr, "usage: l2l_depth [--hidden N] [--seq N] [--micro N] [--micro-batches N]\n");
      return false;
    }
  }
  return true;
}

std::int64_t bert_parameter_bytes(const Settings& s, int layers) {
  const auto model = models::build_zoo_model("bert", bert_config(s, layers), 3);
  return model.parameter_bytes();
}

// The device-side peak of ordinary training, L2L and L2L's constant-memory variant at 4 to 32
// blocks, each L2L peak beside the planner's prediction.
void print_depth_table(const Settings& s) {
  std::printf("%6s %12s | %12s %8s | %12s %8s %12s %8s | %12s %8s %8s\n", "layers", "parameters", "ordinary", "step s",
              "L2L", "pred err", "L2L host", "step s", "L2L const", "pred err", "step s");
  std::printf("%6s %12s | %12s %8s | %12s %8s %12s %8s | %12s %8s %8s\n", "", "", "peak", "", "peak", "", "side", "", "peak", "", "");
  std::optional<std::int64_t> first_ordinary, first_l2l, first_const;
  for (const int layers : {4, 8, 16, 32}) {
    std::fflush(stdout);
    const std::int64_t params = bert_parameter_bytes(s, layers);
    const Measured o = ordinary(s, layers);
    const Measured l = measure_l2l(s, layers, false);
    const Measured c = measure_l2l(s, layers, true);
    const auto [predicted_device, predicted_const] = predicted(s, layers);
    if (!first_ordinary) {
      first_ordinary = o.device_peak;
      first_l2l = l.device_peak;
      first_const = c.device_peak;
    }
    std::printf("%6d %12s | %12s %8.3f | %12s %+7.2f%% %12s %8.3f | %12s %+7.2f%% %8.3f\n", layers,
                core::format_bytes(params).c_str(), core::format_bytes(o.device_peak).c_str(), o.step_seconds,
                core::format_bytes(l.device_peak).c_str(), error(predicted_device, l.device_peak),
                core::format_bytes(l.host_peak).c_str(), l.step_seconds, core::format_bytes(c.device_peak).c_str(),
                error(predicted_const, c.device_peak), c.step_seconds);
    if (layers == 32) {
      std::printf("\n4 -> 32 layers: ordinary x%.2f, L2L x%.2f, L2L constant-memory x%.2f\n",
                  static_cast<double>(o.device_peak) / static_cast<double>(*first_ordinary),
                  static_cast<double>(l.device_peak) / static_cast<double>(*first_l2l),
                  static_cast<double>(c.device_peak) / static_cast<double>(*first_const));
    }
  }
}

// Parameters alone past the budget: the 32-layer model under a budget of half its parameters.
void print_run_under_half_the_parameters(const Settings& s) {
  const std::int64_t params = bert_parameter_bytes(s, 32);
  const std::int64_t budget = params / 2;
  const Measured b = measure_l2l(s, 32, true, budget);
  std::printf("\n32 layers, parameters %s, budget %s (half of them): L2L constant-memory trained, device peak %s, "
              "host %s, step %.3f s\n",
              core::format_bytes(params).c_str(), core::format_bytes(budget).c_str(),
              core::format_bytes(b.device_peak).c_str(), core::format_bytes(b.host_peak).c_str(), b.step_seconds);
}

// Copy bandwidth: the step is compute-bound until a stage's parameter copy takes longer than a
// stage's compute, then it follows the copies.
void print_copy_bandwidth_table(const Settings& s) {
  const int layers = 16;
  const std::int64_t copy_bytes = 2 * bert_parameter_bytes(s, layers);  // every stage in forward and again in backward
  // The planner's lanes at each bandwidth: the trace's times (3 repeats), its copy-in bandwidth set to
  // the throttle's (memcpy's measured one without a throttle).
  const core::Trace measured_trace = profiled(s, layers, 3);
  const planner::LayerGraph graph(measured_trace);
  std::printf("\n%d layers, boundaries on the host, copies to the device throttled (the parameters, %s per step, and "
              "the boundaries brought back); memcpy measured at %.2f GB/s by the profiler:\n",
              layers, core::format_bytes(copy_bytes).c_str(), measured_trace.device.host_to_device_bytes_per_s / 1e9);
  std::printf("%14s %10s %10s %8s  %s\n", "copy bandwidth", "step s", "predicted", "error", "predicted bound");
  for (const double mb_per_s : {0.0, 200.0, 50.0, 20.0, 10.0, 5.0}) {
    std::fflush(stdout);
    const double seconds = throttled_step_seconds(s, layers, mb_per_s * 1e6);
    core::Trace trace = measured_trace;
    if (mb_per_s > 0) trace.device.host_to_device_bytes_per_s = mb_per_s * 1e6;
    const core::CostModel costs(trace);
    const auto p = planner::predict_l2l_step(costs, graph, sizes(s), core::L2LChoice{true});
    const double predicted_seconds = static_cast<double>(p.step_ns) / 1e9;
    char bandwidth[32];
    if (mb_per_s == 0) {
      std::snprintf(bandwidth, sizeof bandwidth, "memcpy");
    } else {
      std::snprintf(bandwidth, sizeof bandwidth, "%.0f MB/s", mb_per_s);
    }
    std::printf("%14s %10.3f %10.3f %+7.1f%%  %s\n", bandwidth, seconds, predicted_seconds,
                100 * (predicted_seconds - seconds) / seconds, planner::describe_l2l_bound(p).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  runtime::run_with_passive_thread_pools(argv);  // as the headroom command runs torch work
  core::enter_host_memory_regime();              // and in its host-memory regime (core/host_memory.h)
  Settings s;
  if (!parse_settings(argc, argv, s)) return 2;
  std::printf("bert hidden %d, seq %d, %d micro-batches of %d, Adam; device-side peak of one step\n\n", s.hidden, s.seq,
              s.micro_batches, s.micro);
  print_depth_table(s);
  print_run_under_half_the_parameters(s);
  print_copy_bandwidth_table(s);
  return 0;
}
