#pragma once
// How fast a machine runs what a step's layers are made of, timed in about a second: a matrix
// product and a convolution (compute-bound: linear layers, attention, convolutions) and an
// elementwise pass over arrays past the caches (memory-bound: activations, norms, the optimizer),
// at the threads the step runs with. A trace records its machine's; plan, simulate and execute time
// the machine at hand, and where the two differ beyond the calibration's own noise they say so and
// rescale each layer's time by the ratio of the class of work it is made of (the idea Habitat uses
// across GPUs: a kernel's time scales with the resource that bounds it).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace headroom::core {

class JsonNode;

// One timing of the three kernels.
struct CalibrationRun {
  double matmul_flops_per_s = 0;
  double conv_flops_per_s = 0;
  double memory_bytes_per_s = 0;  // bytes read and written by the elementwise pass
  bool operator==(const CalibrationRun&) const = default;
};

struct Calibration {
  std::string device;  // as DeviceInfo::name
  int threads = 0;
  std::string measured_at;  // ISO 8601 UTC
  // At least one. The profiler times one before each batch size and one at the end, so a machine
  // whose speed changed while it profiled is seen.
  std::vector<CalibrationRun> runs;
  bool operator==(const Calibration&) const = default;

  // The best run's: other load only slows a run down.
  double matmul() const;
  double conv() const;
  double memory() const;
  // Compute-bound work's speed: the geometric mean of the matrix product's and the convolution's.
  double compute() const;
  // The largest (best - median) / median of any kernel over the runs: how much faster the best run
  // was than the typical one while the machine was timed (another load for a stretch of it); a
  // single slow run does not count. 0 with one run.
  double spread() const;
};

// What a time measured on one machine is multiplied by to hold on another, per class of work.
struct SpeedRatio {
  double compute = 1;  // compute-bound work of no one kind: the matrix product's and the convolution's geometric mean
  double memory = 1;
  // Beyond both calibrations' noise: the rescale applies and is said.
  bool differs = false;
  // A layer that is a matrix product (linear, attention, a contrastive loss's similarities) or a
  // convolution, by its kind: the two need not move together (docs/results.md, "Which kernel a
  // layer's time follows"). Absent: as `compute`.
  std::optional<double> matmul;
  std::optional<double> conv;
};

// `recorded`'s times to `here`'s. Differs where either class is off by more than the noise: the
// larger spread of the two (the range of their runs), and at least kCalibrationTolerance (above the
// range of a calibration's runs on an idle machine: docs/results.md, "Time on the machine at hand").
inline constexpr double kCalibrationTolerance = 0.10;
SpeedRatio speed_ratio(const Calibration& recorded, const Calibration& here);

// One line for the user: how the machine at hand compares with the one the times were measured on.
std::string describe_speed(const SpeedRatio& ratio, const Calibration& recorded, const Calibration& here);

// The share of a layer's time that moves memory rather than computes: the bytes it must at least
// read and write (its inputs and output in forward, about twice that in backward) at the
// calibrated bandwidth, over its measured time; within [0, 1].
double memory_share(std::int64_t moved_bytes, std::int64_t ns, double bytes_per_s);

nlohmann::json to_json(const Calibration& calibration);
Calibration read_calibration(const JsonNode& node);

}  // namespace headroom::core
