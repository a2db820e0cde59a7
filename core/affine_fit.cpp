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

AffineFit fit_affine_relative(std::span<const double> xs, std::span<const double> ys) {
  if (xs.size() != ys.size() || xs.empty()) {
    throw std::invalid_argument("fit_affine_relative: need equally many x and y values, at least one");
  }
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (!(ys[i] > 0)) throw std::invalid_argument("fit_affine_relative: every y must be positive");
    const double w = 1.0 / (ys[i] * ys[i]);
    sw += w;
    sx += w * xs[i];
    sy += w * ys[i];
    sxx += w * xs[i] * xs[i];
    sxy += w * xs[i] * ys[i];
  }
  AffineFit fit;
  const double spread = sw * sxx - sx * sx;
  fit.slope = spread > 0 ? (sw * sxy - sx * sy) / spread : 0.0;
  fit.intercept = (sy - fit.slope * sx) / sw;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    fit.max_abs_residual = std::max(fit.max_abs_residual, std::fabs(ys[i] - fit.at(xs[i])));
  }
  return fit;
}

LinkLine fit_link_line(std::span<const double> bytes, std::span<const double> seconds, const std::string& what) {
  const AffineFit fit = fit_affine_relative(bytes, seconds);
  if (!(fit.slope > 0)) throw std::runtime_error(what + ": the time did not grow with the size, so no link was fitted");
  return {1.0 / fit.slope, std::llround(std::max(fit.intercept, 0.0) * 1e9)};
}

}  // namespace headroom::core
