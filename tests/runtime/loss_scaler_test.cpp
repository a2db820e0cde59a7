#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/loss_scaler.h"

namespace headroom {
namespace {

// fp16's dynamic loss scaling, with infs and NaNs injected: a step whose gradients hold any is
// skipped and the scale backs off; clean steps are unscaled exactly (the scale is a power of two),
// and after growth_interval clean steps in a row the scale grows; a skip restarts the count.
TEST(LossScaler, SkipsStepsWithInfOrNanBacksOffAndGrowsAfterCleanSteps) {
  runtime::LossScaleOptions options;
  options.initial_scale = 1024;
  options.growth_interval = 3;
  runtime::LossScaler scaler(torch::kCPU, options);
  EXPECT_EQ(scaler.buffer_bytes(), 12);  // scale, growth tracker, inf flag
  EXPECT_FLOAT_EQ(scaler.scale(torch::tensor(0.5f)).item<float>(), 512.0f);
  // A float16 loss is promoted, as GradScaler's: the default 65536 is past float16's largest.
  EXPECT_TRUE(std::isfinite(runtime::LossScaler(torch::kCPU).scale(torch::tensor(1.0f).to(torch::kHalf)).item<float>()));
  // A scalar parameter's gradient is 0-dimensional; a missing one is skipped.
  const auto scaled = [&](float by) {
    return std::vector<torch::Tensor>{torch::full({4}, 3 * by), torch::full({2, 2}, -by), torch::Tensor(), torch::tensor(by)};
  };
  const auto expect_scale = [&](double expected) { EXPECT_EQ(scaler.current_scale(), expected); };

  auto gradients = scaled(1024);
  gradients[1][0][1] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(scaler.unscale(gradients));
  scaler.update();
  expect_scale(512);
  gradients = scaled(512);
  gradients[0][2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(scaler.unscale(gradients));
  scaler.update();
  expect_scale(256);
  EXPECT_EQ(scaler.skipped_steps(), 2);

  for (int step = 0; step < 3; ++step) {
    gradients = scaled(256);
    EXPECT_TRUE(scaler.unscale(gradients));
    EXPECT_TRUE(torch::equal(gradients[0], torch::full({4}, 3.0f)));
    EXPECT_TRUE(torch::equal(gradients[1], torch::full({2, 2}, -1.0f)));
    EXPECT_EQ(gradients[3].item<float>(), 1.0f);
    scaler.update();
    expect_scale(step < 2 ? 256 : 512);
  }
  // Two clean steps, a skip, then two more: no growth, the count started again.
  for (const bool clean : {true, true, false, true, true}) {
    gradients = scaled(static_cast<float>(scaler.current_scale()));
    if (!clean) gradients[0][0] = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(scaler.unscale(gradients), clean);
    scaler.update();
  }
  expect_scale(256);
  EXPECT_EQ(scaler.skipped_steps(), 3);
}

// A scaled loss's gradients, unscaled, are the unscaled loss's: scaling changes nothing but the range.
TEST(LossScaler, UnscaledGradientsEqualTheUnscaledLosss) {
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({8, 16});
  torch::Tensor w = torch::randn({16, 4}).requires_grad_();
  torch::matmul(x, w).square().mean().backward();
  const torch::Tensor plain = w.grad().clone();
  w.mutable_grad() = torch::Tensor();
  runtime::LossScaler scaler(torch::kCPU);
  scaler.scale(torch::matmul(x, w).square().mean()).backward();
  EXPECT_FALSE(torch::equal(w.grad(), plain));
  ASSERT_TRUE(scaler.unscale({w.grad()}));
  EXPECT_TRUE(torch::allclose(w.grad(), plain, 1e-6, 0));
}

}  // namespace
}  // namespace headroom
