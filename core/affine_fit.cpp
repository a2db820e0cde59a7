#include "core/affine_fit.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace headroom::core {

AffineFit fit_affine(std::span<const std::int64_t> xs, std::span<const std::int64_t> ys) {
  if (xs.size() != ys.size() || xs.empty()) {
    throw std::invalid_argument("fit_affine: need equally many x and y values, at least one");
  }
  const double n = static_cast<double>(xs.size());
  double mean_x = 0, mean_y = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    mean_x += static_cast<double>(xs[i]);
    mean_y += static_cast<double>(ys[i]);
  }
  mean_x /= n;
  mean_y /= n;
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double dx = static_cast<double>(xs[i]) - mean_x;
    sxx += dx * dx;
    sxy += dx * (static_cast<double>(ys[i]) - mean_y);
  }
  AffineFit fit;
  fit.slope = sxx > 0 ? sxy / sxx : 0.0;
  fit.intercept = mean_y - fit.slope * mean_x;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    fit.max_abs_residual =
        std::max(fit.max_abs_residual, std::fabs(static_cast<double>(ys[i]) - fit.at(static_cast<double>(xs[i]))));
  }
  return fit;
}

}  // namespace headroom::core
