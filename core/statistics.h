#pragma once
// The summaries every measurement in headroom goes through: the median of repeated timings (robust
// to a step disturbed by other load), how far it may be off, and the relative error of a prediction
// ((predicted - measured) / measured, signed).
#include <algorithm>
#include <cmath>
#include <vector>

namespace headroom::core {

// The middle value; with an even count the mean of the two middle values (in T's arithmetic, so
// integer nanoseconds round toward zero). `values` must not be empty.
template <typename T>
T median(std::vector<T> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// (predicted - measured) / |measured|, signed so a reader can tell a prediction that is too high
// (above 0) from one too low; 0 when nothing was measured, so a report of a run that measured
// nothing carries no invented error.
inline double relative_error(double predicted, double measured) {
  return measured != 0 ? (predicted - measured) / std::fabs(measured) : 0.0;
}

// (max - min) / median of repeated measurements: how far apart they are; 0 for fewer than two.
inline double relative_spread(std::vector<double> values) {
  if (values.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  const double spread = *hi - *lo;
  const double mid = median(std::move(values));
  return mid != 0 ? spread / std::fabs(mid) : 0.0;
}

// The value a share q (0 to 1) of `values` lies below, between the two nearest by linear
// interpolation. `values` must not be empty.
inline double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double at = q * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(at));
  const std::size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (at - static_cast<double>(below)) * (values[above] - values[below]);
}

// How far the median of repeated timings may be from the median of the machine's, relative to it:
// the median's standard error, 1.2533 σ / √n, with σ from the interquartile range (IQR / 1.349), so
// that a few disturbed runs do not widen it. 0 for fewer than `least` values.
inline double relative_median_error(const std::vector<double>& values, std::size_t least) {
  if (values.empty() || values.size() < least) return 0;
  const double mid = quantile(values, 0.5);
  if (mid == 0) return 0;
  const double sigma = (quantile(values, 0.75) - quantile(values, 0.25)) / 1.349;
  return 1.2533 * sigma / std::sqrt(static_cast<double>(values.size())) / std::fabs(mid);
}

}  // namespace headroom::core
