#include "core/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/json_reader.h"
#include "core/statistics.h"

namespace headroom::core {

namespace {

double median_of(const std::vector<CalibrationRun>& runs, double CalibrationRun::*field) {
  std::vector<double> values;
  for (const auto& r : runs) values.push_back(r.*field);
  return values.empty() ? 0.0 : median(std::move(values));
}

// The fastest run: on a shared machine (a VM whose cores its neighbours take) other load only
// slows a run down, so the best one is the machine's own speed; the spread says how much slower
// the others were.
double best_of(const std::vector<CalibrationRun>& runs, double CalibrationRun::*field) {
  double best = 0;
  for (const auto& r : runs) best = std::max(best, r.*field);
  return best;
}

// How much faster the best run was than the median one: a machine slowed for a stretch by another
// load moves its median, one slow run (a burst of another load for a tenth of a second) does not.
double spread_of(const std::vector<CalibrationRun>& runs, double CalibrationRun::*field) {
  if (runs.size() < 2) return 0;
  const double mid = median_of(runs, field);
  return mid > 0 ? (best_of(runs, field) - mid) / mid : 0.0;
}

}  // namespace

double Calibration::matmul() const { return best_of(runs, &CalibrationRun::matmul_flops_per_s); }
double Calibration::conv() const { return best_of(runs, &CalibrationRun::conv_flops_per_s); }
double Calibration::memory() const { return best_of(runs, &CalibrationRun::memory_bytes_per_s); }
double Calibration::compute() const { return std::sqrt(matmul() * conv()); }

double Calibration::spread() const {
  return std::max({spread_of(runs, &CalibrationRun::matmul_flops_per_s), spread_of(runs, &CalibrationRun::conv_flops_per_s),
                   spread_of(runs, &CalibrationRun::memory_bytes_per_s)});
}

SpeedRatio speed_ratio(const Calibration& recorded, const Calibration& here) {
  SpeedRatio ratio;
  if (here.compute() <= 0 || here.memory() <= 0 || recorded.compute() <= 0 || recorded.memory() <= 0) return ratio;
  // A time on `recorded` times its speed over here's is the time here.
  ratio.compute = recorded.compute() / here.compute();
  if (recorded.matmul() > 0 && here.matmul() > 0) ratio.matmul = recorded.matmul() / here.matmul();
  if (recorded.conv() > 0 && here.conv() > 0) ratio.conv = recorded.conv() / here.conv();
  ratio.memory = recorded.memory() / here.memory();
  const double noise = std::max(kCalibrationTolerance, std::max(recorded.spread(), here.spread()));
  const auto off = [noise](double r) { return std::fabs(std::log(r)) > std::log1p(noise); };
  ratio.differs = off(ratio.compute) || off(ratio.memory) || off(ratio.matmul.value_or(1)) || off(ratio.conv.value_or(1));
  return ratio;
}

std::string describe_speed(const SpeedRatio& ratio, const Calibration& recorded, const Calibration& here) {
  // The product and the convolution apart, where they did not move together.
  char kinds[128] = "";
  const double matmul = ratio.matmul.value_or(ratio.compute), conv = ratio.conv.value_or(ratio.compute);
  if (std::fabs(std::log(matmul / conv)) > std::log1p(kCalibrationTolerance)) {
    std::snprintf(kinds, sizeof kinds, " (matrix products %.3gx, convolutions %.3gx)", 1 / matmul, 1 / conv);
  }
  char line[640];
  std::snprintf(line, sizeof line,
                "this machine (%s, %d thread%s) runs compute-bound work %.3gx%s and memory-bound work %.3gx as fast as the "
                "one the times were measured on (%s, %d thread%s, %s)",
                here.device.c_str(), here.threads, here.threads == 1 ? "" : "s", 1 / ratio.compute, kinds, 1 / ratio.memory,
                recorded.device.c_str(), recorded.threads, recorded.threads == 1 ? "" : "s", recorded.measured_at.c_str());
  return line;
}

double memory_share(std::int64_t moved_bytes, std::int64_t ns, double bytes_per_s) {
  if (ns <= 0 || bytes_per_s <= 0) return 1;  // nothing timed: scales as memory, the safer class on a slower machine
  const double seconds_moving = static_cast<double>(std::max<std::int64_t>(moved_bytes, 0)) / bytes_per_s;
  return std::clamp(seconds_moving / (static_cast<double>(ns) * 1e-9), 0.0, 1.0);
}

nlohmann::json to_json(const Calibration& calibration) {
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& r : calibration.runs) {
    runs.push_back({{"matmul_flops_per_s", r.matmul_flops_per_s},
                    {"conv_flops_per_s", r.conv_flops_per_s},
                    {"memory_bytes_per_s", r.memory_bytes_per_s}});
  }
  return {{"device", calibration.device},
          {"threads", calibration.threads},
          {"measured_at", calibration.measured_at},
          {"runs", std::move(runs)}};
}

Calibration read_calibration(const JsonNode& node) {
  node.expect_object();
  Calibration c;
  c.device = node.at("device").as_string();
  c.threads = static_cast<int>(node.at("threads").as_int_in(1, 4096));
  c.measured_at = node.at("measured_at").as_string();
  const auto positive = [](const JsonNode& n) {
    const double v = n.as_double();
    if (!(v > 0) || !std::isfinite(v) || v > 1e18) n.fail("expected a positive speed below 1e18");
    return v;
  };
  for (const auto& r : node.at("runs").elements()) {
    r.expect_object();
    c.runs.push_back({positive(r.at("matmul_flops_per_s")), positive(r.at("conv_flops_per_s")),
                      positive(r.at("memory_bytes_per_s"))});
  }
  if (c.runs.empty() || c.runs.size() > 4096) node.at("runs").fail("expected 1 to 4096 runs");
  return c;
}

}  // namespace headroom::core
