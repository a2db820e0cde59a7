#pragma once
// Memory per layer is affine in batch size (DESIGN.md): bytes(b) = intercept + slope * b.
#include <cstdint>
#include <span>

namespace headroom::core {

struct AffineFit {
  double intercept = 0;
  double slope = 0;
  double max_abs_residual = 0;  // how far the worst sample lies off the line
  double at(double x) const { return intercept + slope * x; }
};

// Least-squares line through (xs[i], ys[i]). One point gives slope 0 through that point.
AffineFit fit_affine(std::span<const std::int64_t> xs, std::span<const std::int64_t> ys);

}  // namespace headroom::core
