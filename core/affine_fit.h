#pragma once
// Memory per layer is affine in batch size (docs/design.md, "Fits"): bytes(b) = intercept + slope * b.
#include <cstdint>
#include <span>
#include <string>

namespace headroom::core {

struct AffineFit {
  double intercept = 0;
  double slope = 0;
  double max_abs_residual = 0;  // how far the worst sample lies off the line
  double at(double x) const { return intercept + slope * x; }
};

// Least-squares line through (xs[i], ys[i]). One point gives slope 0 through that point.
AffineFit fit_affine(std::span<const std::int64_t> xs, std::span<const std::int64_t> ys);

// Least squares relative to each y (weights 1 / y^2), for timings over sizes that span orders of
// magnitude: the small sizes tell the intercept (a latency), the large ones the slope (1 /
// bandwidth), and neither drowns the other. Every y must be positive.
AffineFit fit_affine_relative(std::span<const double> xs, std::span<const double> ys);

// A link timed with copies (or messages) of several sizes, through fit_affine_relative: bandwidth
// 1 / slope, latency the intercept (at least 0). Throws std::runtime_error starting with `what`
// when the time did not grow with the size.
struct LinkLine {
  double bytes_per_second = 0;
  std::int64_t latency_ns = 0;
};
LinkLine fit_link_line(std::span<const double> bytes, std::span<const double> seconds, const std::string& what);

}  // namespace headroom::core
