#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/statistics.h"

namespace headroom {
namespace {

TEST(Statistics, MedianAveragesTheTwoMiddleValuesOfAnEvenCount) {
  EXPECT_EQ(core::median<std::int64_t>({5, 1, 3}), 3);
  EXPECT_EQ(core::median<std::int64_t>({4, 1, 3, 2}), 2);  // (2 + 3) / 2 in integer nanoseconds
  EXPECT_DOUBLE_EQ(core::median<double>({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(core::median<double>({7}), 7);
}

TEST(Statistics, RelativeErrorIsAgainstTheMeasuredValue) {
  EXPECT_DOUBLE_EQ(core::relative_error(110, 100), 0.1);
  EXPECT_DOUBLE_EQ(core::relative_error(90, 100), -0.1);  // signed: predicted too low
  EXPECT_DOUBLE_EQ(core::relative_error(100, 0), 0.0);  // nothing measured: no error invented
}

TEST(Statistics, QuantilesInterpolateBetweenTheNearestValues) {
  EXPECT_DOUBLE_EQ(core::quantile({4, 1, 3, 2, 5}, 0.25), 2);
  EXPECT_DOUBLE_EQ(core::quantile({4, 1, 3, 2}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(core::quantile({4, 1, 3, 2}, 0.75), 3.25);
  EXPECT_DOUBLE_EQ(core::quantile({7}, 0.9), 7);
}

TEST(Statistics, TheMediansErrorFallsAsTheRootOfTheCountAndIgnoresOutliers) {
  // Quartiles 97.5 and 102.5 about a median of 100: σ = 5 / 1.349.
  const std::vector<double> five{95, 97.5, 100, 102.5, 105};
  const double one = 1.2533 * (5 / 1.349) / 100;
  EXPECT_NEAR(core::relative_median_error(five, 4), one / std::sqrt(5.0), 1e-12);
  std::vector<double> twenty;
  for (int i = 0; i < 4; ++i) twenty.insert(twenty.end(), five.begin(), five.end());
  EXPECT_NEAR(core::relative_median_error(twenty, 4), one / std::sqrt(20.0), 1e-12);
  // A step disturbed by other load moves neither quartile.
  std::vector<double> disturbed = five;
  disturbed.back() = 1000;
  EXPECT_DOUBLE_EQ(core::relative_median_error(disturbed, 4), core::relative_median_error(five, 4));
  // Too few timings say nothing of their spread.
  EXPECT_EQ(core::relative_median_error({95, 100, 105}, 4), 0.0);
  EXPECT_EQ(core::relative_median_error({}, 4), 0.0);
}

}  // namespace
}  // namespace headroom
