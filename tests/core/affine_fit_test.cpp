#include <gtest/gtest.h>

#include <stdexcept>

#include "core/affine_fit.h"

namespace headroom {
namespace {

TEST(AffineFit, ExactLineHasNoResidual) {
  const std::vector<std::int64_t> xs{1, 2, 4, 8}, ys{110, 210, 410, 810};
  const auto fit = core::fit_affine(xs, ys);
  EXPECT_DOUBLE_EQ(fit.slope, 100.0);
  EXPECT_DOUBLE_EQ(fit.intercept, 10.0);
  EXPECT_NEAR(fit.max_abs_residual, 0.0, 1e-9);
}

// Relative to each time: the 4 KiB copy's latency survives beside the 32 MiB copy's bandwidth.
TEST(AffineFit, LinkLineFromCopiesOfSeveralSizes) {
  const std::vector<double> bytes{4096, 65536, 1 << 20, 32 << 20};
  std::vector<double> seconds;
  for (const double b : bytes) seconds.push_back(2e-6 + b / 5e9);
  const core::LinkLine line = core::fit_link_line(bytes, seconds, "probe");
  EXPECT_NEAR(line.bytes_per_second, 5e9, 5e9 * 1e-9);
  EXPECT_EQ(line.latency_ns, 2000);
  // A time that does not grow with the size fits no link, and says which probe it was.
  try {
    core::fit_link_line(bytes, std::vector<double>{4e-3, 3e-3, 2e-3, 1e-3}, "host copy probe");
    FAIL() << "a shrinking time was fitted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("host copy probe: ", 0), 0u) << e.what();
  }
}

TEST(AffineFit, ResidualShowsACurve) {
  const std::vector<std::int64_t> xs{1, 2, 3}, ys{1, 4, 9};
  EXPECT_GT(core::fit_affine(xs, ys).max_abs_residual, 0.3);
}

}  // namespace
}  // namespace headroom
