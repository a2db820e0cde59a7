#include <gtest/gtest.h>

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

}  // namespace
}  // namespace headroom
