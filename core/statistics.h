#pragma once
// The two summaries every measurement in headroom goes through: the median of repeated timings
// (robust to a step disturbed by other load) and the relative error of a prediction
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

}  // namespace headroom::core
