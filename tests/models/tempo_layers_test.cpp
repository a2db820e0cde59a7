// Tempo layers against the standard ones: gradients, GELU's recovered derivative over its
// whole input range, and the bytes each keeps for backward.
#include <gtest/gtest.h>

#include <cstdio>

#include "models/tempo_layers.h"
#include "runtime/memory_recorder.h"

namespace headroom {
namespace {

double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).norm().item<double>() / want.norm().item<double>();
}

TEST(TempoGelu, RecoveredDerivativeErrorOverTheWholeRange) {
  // Inputs on a fine grid across everything fp32 GELU distinguishes, plus a denser one around the
  // minimum, where the inverse is worst conditioned.
  const auto wide = torch::linspace(-12.0, 12.0, 2'400'001, torch::kDouble);
  const auto near_min = torch::linspace(models::kGeluArgMin - 0.05, models::kGeluArgMin + 0.05, 200'001, torch::kDouble);
  const auto x64 = torch::cat({wide, near_min});
  const auto x = x64.to(torch::kFloat);
  const auto exact = (0.5 * (1.0 + torch::erf(x64 / std::sqrt(2.0))) +
                      x64 * torch::exp(-0.5 * x64 * x64) / std::sqrt(2.0 * M_PI));
  const auto recovered =
      models::gelu_derivative_from_output(torch::gelu(x), x >= models::kGeluArgMin).to(torch::kDouble);
  const auto error = (recovered - exact).abs();

  const auto region_max = [&](const torch::Tensor& in) { return error.masked_select(in).max().item<double>(); };
  const double near = region_max((x64 - models::kGeluArgMin).abs() < 0.05);
  const double tail = region_max(x64 < -3.0);
  const double rest = region_max(((x64 - models::kGeluArgMin).abs() >= 0.05) & (x64 >= -3.0));
  std::printf("GELU derivative from output, max |error|: near the minimum %.3g, x < -3 %.3g, elsewhere %.3g\n", near,
              tail, rest);
  // Near the minimum fp32's rounding of y (ulp ~1.5e-8 at y = -0.17) leaves x uncertain by
  // ~sqrt(2 * 1.5e-8 / gelu''(x*)) ~ 2.6e-4, so the derivative (slope gelu'' = 0.43) by ~1.1e-4:
  // that loss is in the saved output, not the method.
  EXPECT_LT(near, 3e-4);
  EXPECT_LT(tail, 1e-5);
  EXPECT_LT(rest, 1e-5);
  EXPECT_FALSE(torch::isnan(recovered).any().item<bool>());
  // The tensor-op lookup (CUDA's path) reads the same tables.
  const auto by_ops =
      models::gelu_derivative_from_output_by_tensor_ops(torch::gelu(x), x >= models::kGeluArgMin).to(torch::kDouble);
  const double ops_error = (by_ops - exact).abs().masked_select((x64 - models::kGeluArgMin).abs() >= 0.05).max().item<double>();
  std::printf("tensor-op path, max |error| away from the minimum %.3g\n", ops_error);
  EXPECT_LT(ops_error, 1e-5);
}

// bf16-autocast hands the Tempo GELU a bfloat16 output: the CPU takes it through the element loop
// (no float32 temporaries) and gives what the tensor-op lookup gives, to bfloat16's rounding of the
// derivative (at most 1.13, so 2^-7 is one unit in its last place).
TEST(TempoGelu, Bfloat16OutputRunsTheLoopAsTheTensorOpsDo) {
  const torch::Tensor x = torch::linspace(-6.0, 6.0, 10001, torch::kFloat);
  const torch::Tensor y = torch::gelu(x).to(torch::kBFloat16);
  const torch::Tensor mask = x >= models::kGeluArgMin;
  const torch::Tensor loop = models::gelu_derivative_from_output(y, mask);
  const torch::Tensor ops = models::gelu_derivative_from_output_by_tensor_ops(y, mask);
  EXPECT_EQ(loop.scalar_type(), torch::kBFloat16);
  EXPECT_LE((loop.to(torch::kDouble) - ops.to(torch::kDouble)).abs().max().item<double>(), 2.0 / 128);
}

TEST(TempoGelu, GradientMatchesGelu) {
  torch::manual_seed(3);
  const auto x = (torch::randn({64, 257}) * 3).requires_grad_(true);
  const auto upstream = torch::randn({64, 257});
  torch::gelu(x).backward(upstream);
  const auto want = x.grad().clone();
  x.mutable_grad() = torch::Tensor();
  const auto y = models::tempo_gelu(x);
  EXPECT_TRUE(torch::equal(y, torch::gelu(x)));
  y.backward(upstream);
  EXPECT_LT(relative_error(x.grad(), want), 1e-5);
}

TEST(TempoLayerNorm, GradientsMatchLayerNorm) {
  torch::manual_seed(4);
  for (const double gamma_scale : {1.0, 0.05}) {
    SCOPED_TRACE(gamma_scale);
    const auto x = (torch::randn({4, 9, 48}) * 2 + 0.5).requires_grad_(true);
    const auto gamma = (torch::rand({48}) + 0.5).mul(gamma_scale).requires_grad_(true);
    const auto beta = torch::randn({48}).requires_grad_(true);
    const auto upstream = torch::randn({4, 9, 48});

    torch::layer_norm(x, {48}, gamma, beta, 1e-5).backward(upstream);
    const auto want_x = x.grad().clone(), want_gamma = gamma.grad().clone(), want_beta = beta.grad().clone();
    x.mutable_grad() = torch::Tensor();
    gamma.mutable_grad() = torch::Tensor();
    beta.mutable_grad() = torch::Tensor();

    const auto y = models::tempo_layer_norm(x, gamma, beta, 1e-5);
    EXPECT_LT(relative_error(y, torch::layer_norm(x, {48}, gamma, beta, 1e-5)), 1e-6);
    y.backward(upstream);
    EXPECT_LT(relative_error(x.grad(), want_x), 1e-5);
    EXPECT_LT(relative_error(gamma.grad(), want_gamma), 1e-5);
    EXPECT_LT(relative_error(beta.grad(), want_beta), 1e-5);
  }
}

TEST(TempoLayerNorm, TinyGammaTakesTheSafePath) {
  torch::manual_seed(5);
  const auto x = torch::randn({6, 16}).requires_grad_(true);
  auto g = torch::rand({16}) + 0.5;
  g[3] = 0.0;  // (y - beta) / gamma is undefined in this column
  const auto gamma = g.requires_grad_(true);
  const auto beta = torch::randn({16}).requires_grad_(true);
  const auto upstream = torch::randn({6, 16});
  torch::layer_norm(x, {16}, gamma, beta, 1e-5).backward(upstream);
  const auto want = x.grad().clone();
  x.mutable_grad() = torch::Tensor();
  models::tempo_layer_norm(x, gamma, beta, 1e-5).backward(upstream);
  EXPECT_FALSE(torch::isnan(x.grad()).any().item<bool>());
  EXPECT_LT(relative_error(x.grad(), want), 1e-6);
}

TEST(TempoAttention, GradientsMatchDropoutThenMatmul) {
  torch::manual_seed(6);
  const auto scores = torch::randn({2, 3, 16, 16}).requires_grad_(true);
  const auto value = torch::randn({2, 3, 16, 8}).requires_grad_(true);
  const auto keep = torch::rand({2, 3, 16, 16}) >= 0.1;
  const double scale = 1.0 / 0.9;
  const auto upstream = torch::randn({2, 3, 16, 8});

  torch::matmul(torch::softmax(scores, -1) * keep * scale, value).backward(upstream);
  const auto want_scores = scores.grad().clone(), want_value = value.grad().clone();
  scores.mutable_grad() = torch::Tensor();
  value.mutable_grad() = torch::Tensor();

  models::tempo_dropout_matmul(torch::softmax(scores, -1), keep, scale, value).backward(upstream);
  EXPECT_LT(relative_error(scores.grad(), want_scores), 1e-5);
  EXPECT_LT(relative_error(value.grad(), want_value), 1e-5);
}

// Bytes still allocated after forward, beyond the inputs and the output, for y = f(x) where x is
// a fresh non-leaf (as a Linear's output would be) that only f holds on to.
template <typename F>
std::int64_t kept_besides_output(F f, const torch::Tensor& source) {
  auto recorder = std::make_shared<runtime::MemoryRecorder>();
  runtime::ScopedMemoryRecording recording(recorder);
  torch::Tensor x = source * 1.0;  // the producer's output, allocated while recording
  torch::Tensor y = f(x);
  x = torch::Tensor();
  return recorder->allocated() - static_cast<std::int64_t>(y.numel() * y.element_size());
}

TEST(TempoLayers, KeepLessThanTheStandardLayers) {
  const auto source = torch::randn({32, 128}).requires_grad_(true);
  const std::int64_t n = source.numel();
  EXPECT_EQ(kept_besides_output([](const torch::Tensor& x) { return torch::gelu(x); }, source), 4 * n);
  EXPECT_EQ(kept_besides_output([](const torch::Tensor& x) { return models::tempo_gelu(x); }, source), n);  // the mask

  const auto gamma = (torch::rand({128}) + 0.5).requires_grad_(true);
  const auto beta = torch::zeros({128}).requires_grad_(true);
  const std::int64_t rows = 32;
  // Standard: the input, mean and rstd. Tempo: rstd only (the output is shared with the next layer).
  EXPECT_EQ(kept_besides_output([&](const torch::Tensor& x) { return torch::layer_norm(x, {128}, gamma, beta, 1e-5); },
                                source),
            4 * n + 2 * 4 * rows);
  EXPECT_EQ(kept_besides_output([&](const torch::Tensor& x) { return models::tempo_layer_norm(x, gamma, beta, 1e-5); },
                                source),
            4 * rows);
}

}  // namespace
}  // namespace headroom
