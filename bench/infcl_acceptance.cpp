// Acceptance of Inf-CL (docs/design.md, "Inf-CL"), as Markdown tables:
//   ./build/default/bench/infcl_acceptance equal  [--batches 1024,4096] [--dim 512]
//       tiled loss against the standard one: loss and gradients of q, k and the log-scale, with tiles
//       that divide the batch and tiles that do not
//   ./build/default/bench/infcl_acceptance memory [--batches 4096,16384,65536] [--dim 512] [--tiles 1024x1024]
//                                                 [--standard-limit 20GiB] [--tiled-max 65536] [--repeats 3]
//       the loss alone (forward and backward of given embeddings), standard and tiled: peak bytes
//       (allocator hook) and time; the standard loss runs only where its B x B buffers fit the limit,
//       the tiled one up to --tiled-max; past those the peak is fitted through the runs, and says so
//   ./build/default/bench/infcl_acceptance step [--batches 4096] [--micro 1024] [--tiles 1000x777] [--set k=v,...]
//       zoo `clip`: one SGD step under the gradient cache (micro-batches of --micro, tiled loss)
//       against the full-batch step with the standard loss, from the same weights and data (dropout
//       off on both sides): the largest relative difference of the weights after the step
// Everything is measured here; nothing is taken from a trace.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/host_memory.h"
#include "executor/grad_cache.h"
#include "executor/plan_runner.h"
#include "models/config.h"
#include "models/zoo.h"
#include "runtime/optimizer.h"
#include "core/statistics.h"
#include "core/units.h"
#include "models/contrastive_loss.h"
#include "runtime/memory_recorder.h"
#include "runtime/host_info.h"

using namespace headroom;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::vector<std::int64_t> batches;
  std::int64_t dim = 512;
  models::LossTiles tiles{1024, 1024};
  std::int64_t standard_limit = std::int64_t{20} << 30;
  int repeats = 3;
  std::int64_t micro = 1024;
  std::int64_t tiled_limit = 65536;  // larger batches' tiled peaks are fitted, not run
  std::map<std::string, std::string> settings;
};

std::vector<std::int64_t> parse_list(const std::string& text) {
  std::vector<std::int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::int64_t v = std::stoll(item);
    if (v < 1 || v > (std::int64_t{1} << 20)) throw std::invalid_argument("--batches: each between 1 and 2^20, got " + item);
    out.push_back(v);
  }
  return out;
}

torch::Tensor unit_rows(std::int64_t batch, std::int64_t dim, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto x = torch::randn({batch, dim}, gen);
  return x.div_(x.norm(2, 1, true));
}

struct Run {
  double loss = 0;
  torch::Tensor dq, dk, dscale;
  std::int64_t peak_bytes = 0;
  double seconds = 0;
};

// Forward and backward of the loss alone on fresh leaves; the peak counts what the loss allocates
// above the embeddings it is given.
Run run_loss(const torch::Tensor& q0, const torch::Tensor& k0, std::optional<models::LossTiles> tiles, bool keep_grads) {
  torch::Tensor q = q0.detach().clone().requires_grad_(true), k = k0.detach().clone().requires_grad_(true);
  torch::Tensor t = torch::full({}, std::log(1 / 0.07)).requires_grad_(true);
  auto recorder = std::make_shared<runtime::MemoryRecorder>();
  Run r;
  {
    runtime::ScopedMemoryRecording recording(recorder);
    const auto start = Clock::now();
    torch::Tensor loss = tiles ? models::contrastive_loss_tiled(q, k, t, *tiles) : models::contrastive_loss_standard(q, k, t);
    loss.backward();
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    r.loss = loss.item<double>();
  }
  r.peak_bytes = recorder->peak();
  if (keep_grads) {
    r.dq = q.grad();
    r.dk = k.grad();
    r.dscale = t.grad();
  }
  return r;
}

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

int equal(const Options& o) {
  std::printf("| B | D | tiles | divides B | loss rel | dq rel | dk rel | d log-scale rel |\n|---|---|---|---|---|---|---|---|\n");
  double worst = 0;
  for (const std::int64_t b : o.batches) {
    const auto q = unit_rows(b, o.dim, 1), k = unit_rows(b, o.dim, 2);
    const Run standard = run_loss(q, k, std::nullopt, true);
    for (const models::LossTiles tiles : {models::LossTiles{b / 4, b / 4}, models::LossTiles{b / 8, b / 2},
                                          models::LossTiles{b / 3 + 1, b / 5 + 3}, models::LossTiles{1000, 777}}) {
      const Run tiled = run_loss(q, k, tiles, true);
      const double lr = std::abs(tiled.loss - standard.loss) / std::abs(standard.loss);
      const double a = rel(tiled.dq, standard.dq), c = rel(tiled.dk, standard.dk), s = rel(tiled.dscale, standard.dscale);
      worst = std::max({worst, lr, a, c, s});
      const bool divides = b % tiles.rows == 0 && b % tiles.cols == 0;
      std::printf("| %lld | %lld | %lldx%lld | %s | %.1e | %.1e | %.1e | %.1e |\n", static_cast<long long>(b),
                  static_cast<long long>(o.dim), static_cast<long long>(tiles.rows), static_cast<long long>(tiles.cols),
                  divides ? "yes" : "no", lr, a, c, s);
    }
  }
  std::printf("\nworst relative difference %.2e (target <= 1e-5): %s\n", worst, worst <= 1e-5 ? "met" : "NOT met");
  return worst <= 1e-5 ? 0 : 1;
}

// The polynomial through (x_i, y_i), at x (two points: a line, three: a parabola).
double through(const std::vector<std::pair<double, double>>& points, double x) {
  double sum = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    double term = points[i].second;
    for (std::size_t j = 0; j < points.size(); ++j) {
      if (j != i) term *= (x - points[j].first) / (points[i].first - points[j].first);
    }
    sum += term;
  }
  return sum;
}

int memory(const Options& o) {
  struct Row {
    std::int64_t batch;
    std::optional<Run> standard, tiled;
    double standard_s = 0, tiled_s = 0;
  };
  std::vector<Row> rows;
  for (const std::int64_t b : o.batches) {
    Row row{b, std::nullopt, std::nullopt};
    if (3 * b * b * 4 > o.standard_limit && b > o.tiled_limit) {
      rows.push_back(std::move(row));
      continue;
    }
    const auto q = unit_rows(b, o.dim, 1), k = unit_rows(b, o.dim, 2);
    // The standard loss holds the logits and, in backward, their exponentials and gradient: at
    // least three B x B fp32 buffers at once.
    const int repeats = b <= 16384 ? o.repeats : 1;
    if (3 * b * b * 4 <= o.standard_limit) {
      std::vector<double> seconds;
      for (int r = 0; r < repeats; ++r) {
        row.standard = run_loss(q, k, std::nullopt, false);
        seconds.push_back(row.standard->seconds);
      }
      row.standard_s = core::median(seconds);
    }
    if (b <= o.tiled_limit) {
      std::vector<double> seconds;
      for (int r = 0; r < repeats; ++r) {
        row.tiled = run_loss(q, k, o.tiles, false);
        seconds.push_back(row.tiled->seconds);
      }
      row.tiled_s = core::median(seconds);
    }
    std::fprintf(stderr, "B=%lld done\n", static_cast<long long>(b));
    rows.push_back(std::move(row));
  }
  // Where a loss was not run: its peak from the runs that were (standard: the parabola through the
  // three largest, tiled: the line through the two largest), marked as fitted.
  std::vector<std::pair<double, double>> standard_points, tiled_points;
  for (const auto& r : rows) {
    if (r.standard) standard_points.emplace_back(static_cast<double>(r.batch), static_cast<double>(r.standard->peak_bytes));
    if (r.tiled) tiled_points.emplace_back(static_cast<double>(r.batch), static_cast<double>(r.tiled->peak_bytes));
  }
  if (standard_points.size() > 3) standard_points.erase(standard_points.begin(), standard_points.end() - 3);
  if (tiled_points.size() > 2) tiled_points.erase(tiled_points.begin(), tiled_points.end() - 2);
  std::printf("| B | D | standard peak | standard s | tiled (%lldx%lld) peak | tiled s | memory standard / tiled | time tiled / standard |\n",
              static_cast<long long>(o.tiles.rows), static_cast<long long>(o.tiles.cols));
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    const bool fit_standard = !r.standard && standard_points.size() == 3;
    const bool fit_tiled = !r.tiled && tiled_points.size() == 2;
    const double standard = r.standard ? static_cast<double>(r.standard->peak_bytes)
                            : fit_standard ? through(standard_points, static_cast<double>(r.batch)) : 0;
    const double tiled = r.tiled ? static_cast<double>(r.tiled->peak_bytes)
                         : fit_tiled ? through(tiled_points, static_cast<double>(r.batch)) : 0;
    const auto bytes = [](double v, bool measured, bool fitted) {
      if (measured) return core::format_bytes(static_cast<std::int64_t>(v));
      if (fitted) return core::format_bytes(static_cast<std::int64_t>(v)) + " (fitted, not run)";
      return std::string("not run");
    };
    const auto seconds = [](double v, bool measured) {
      char text[32];
      std::snprintf(text, sizeof text, "%.2f", v);
      return measured ? std::string(text) : std::string("-");
    };
    char ratio[32] = "-", time_ratio[32] = "-";
    if (standard > 0 && tiled > 0) std::snprintf(ratio, sizeof ratio, "%.0fx", standard / tiled);
    if (r.standard && r.tiled) std::snprintf(time_ratio, sizeof time_ratio, "%.2f", r.tiled_s / r.standard_s);
    std::printf("| %lld | %lld | %s | %s | %s | %s | %s | %s |\n", static_cast<long long>(r.batch),
                static_cast<long long>(o.dim), bytes(standard, r.standard.has_value(), fit_standard).c_str(),
                seconds(r.standard_s, r.standard.has_value()).c_str(), bytes(tiled, r.tiled.has_value(), fit_tiled).c_str(),
                seconds(r.tiled_s, r.tiled.has_value()).c_str(), ratio, time_ratio);
  }
  return 0;
}

// Weights after one step of `train` from the model's initial weights.
std::vector<torch::Tensor> weights_after_step(const Options& o, std::int64_t batch, bool grad_cache) {
  models::Model model = models::build_zoo_model("clip", o.settings, 0);
  model.set_training(true);
  model.set_dropout(false);
  const auto parameters = model.parameters();
  auto optimizer = runtime::make_optimizer("sgd", parameters);
  std::vector<std::int64_t> sizes;
  for (std::int64_t left = batch; left > 0; left -= std::min(left, o.micro)) sizes.push_back(std::min(left, o.micro));
  const auto micro = executor::make_micro_batches(model, sizes, 3, torch::kCPU);
  optimizer->zero_grad();
  if (grad_cache) {
    model.layers()[static_cast<std::size_t>(executor::contrastive_layer(model))].contrastive->tiles = o.tiles;
    executor::Position position;
    executor::PlanRunner runner(model, {}, position);
    executor::grad_cache_accumulate(model, runner, micro.size(), [&](std::size_t m) { return micro[m]; }, batch, torch::kCPU);
  } else {
    model.forward(executor::concatenate(micro)).backward();
  }
  optimizer->step();
  std::vector<torch::Tensor> out;
  for (const auto& p : parameters) out.push_back(p.detach().clone());
  return out;
}

int step(const Options& o) {
  std::printf("| B | micro-batches | tiles | weights after one SGD step, max relative difference | largest weight change |\n|---|---|---|---|---|\n");
  double worst = 0;
  for (const std::int64_t b : o.batches) {
    models::Model initial = models::build_zoo_model("clip", o.settings, 0);
    const auto before = initial.parameters();
    const auto cached = weights_after_step(o, b, true);
    const auto full = weights_after_step(o, b, false);
    const double diff = executor::max_relative_difference(cached, full);
    double moved = 0;
    for (std::size_t i = 0; i < full.size(); ++i) moved = std::max(moved, (full[i] - before[i]).abs().max().item<double>());
    worst = std::max(worst, diff);
    std::printf("| %lld | %lld of %lld | %lldx%lld | %.2e | %.2e |\n", static_cast<long long>(b),
                static_cast<long long>((b + o.micro - 1) / o.micro), static_cast<long long>(std::min(o.micro, b)),
                static_cast<long long>(o.tiles.rows), static_cast<long long>(o.tiles.cols), diff, moved);
  }
  std::printf("\nworst %.2e (target <= 1e-5): %s\n", worst, worst <= 1e-5 ? "met" : "NOT met");
  return worst <= 1e-5 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  runtime::run_with_passive_thread_pools(argv);  // as the headroom command runs torch work
  core::enter_host_memory_regime();
  const char* usage =
      "usage: infcl_acceptance equal|memory|step [--batches LIST] [--dim D] [--tiles RxC] [--standard-limit SIZE] "
      "[--repeats N] [--micro N] [--tiled-max N] [--set k=v,...]\n";
  // Asking for help anywhere prints it and runs nothing (a run takes minutes).
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::fputs(usage, stdout);
      return 0;
    }
  }
  if (argc < 2) {
    std::fputs(usage, stderr);
    return 2;
  }
  const std::string mode = argv[1];
  Options o;
  try {
    for (int i = 2; i < argc; i += 2) {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(argv[i]) + " needs a value");
      const std::string flag = argv[i], value = argv[i + 1];
      if (flag == "--batches") o.batches = parse_list(value);
      else if (flag == "--dim") o.dim = std::stoll(value);
      else if (flag == "--tiles") {
        const auto x = value.find('x');
        if (x == std::string::npos) throw std::invalid_argument("--tiles: expected ROWSxCOLS, got " + value);
        o.tiles = {std::stoll(value.substr(0, x)), std::stoll(value.substr(x + 1))};
      } else if (flag == "--standard-limit") o.standard_limit = core::parse_bytes(value);
      else if (flag == "--repeats") o.repeats = std::stoi(value);
      else if (flag == "--micro") o.micro = std::stoll(value);
      else if (flag == "--tiled-max") o.tiled_limit = std::stoll(value);
      else if (flag == "--set") {
        std::stringstream in(value);
        std::string item;
        while (std::getline(in, item, ',')) o.settings.insert(models::parse_setting(item));
      }
      else throw std::invalid_argument("unknown flag " + flag);
    }
    if (o.dim < 1 || o.dim > 65536) throw std::invalid_argument("--dim: between 1 and 65536");
    if (o.tiles.rows < 1 || o.tiles.cols < 1 || o.tiles.rows > (1 << 20) || o.tiles.cols > (1 << 20)) {
      throw std::invalid_argument("--tiles: rows and columns between 1 and 2^20");
    }
    if (o.repeats < 1 || o.repeats > 100) throw std::invalid_argument("--repeats: between 1 and 100");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "infcl_acceptance: %s\n", e.what());
    return 2;
  }
  if (mode == "equal") {
    if (o.batches.empty()) o.batches = {1024, 4096};
    return equal(o);
  }
  if (mode == "memory") {
    if (o.batches.empty()) o.batches = {4096, 8192, 16384, 65536, 262144};
    return memory(o);
  }
  if (mode == "step") {
    if (o.batches.empty()) o.batches = {4096};
    if (o.micro < 1 || o.micro > (1 << 20)) {
      std::fprintf(stderr, "infcl_acceptance: --micro: between 1 and 2^20\n");
      return 2;
    }
    return step(o);
  }
  std::fprintf(stderr, "infcl_acceptance: unknown mode '%s' (equal, memory, step)\n", mode.c_str());
  return 2;
}
