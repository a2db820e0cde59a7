#include "models/lean_layers.h"

#include <cmath>

namespace headroom::models {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

constexpr double kInvSqrt2 = 0.70710678118654752;
constexpr double kInvSqrt2Pi = 0.39894228040143268;

torch::Tensor gelu_of(const torch::Tensor& x) { return 0.5 * x * (1.0 + torch::erf(x * kInvSqrt2)); }

torch::Tensor gelu_derivative_of(const torch::Tensor& x) {
  return 0.5 * (1.0 + torch::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * torch::exp(-0.5 * x * x);
}

class LeanGelu : public torch::autograd::Function<LeanGelu> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input) {
    torch::Tensor output = torch::gelu(input);
    ctx->save_for_backward({output, input >= kGeluArgMin});
    return output;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {grads[0] * gelu_derivative_from_output(saved[0], saved[1])};
  }
};

class LeanLayerNorm : public torch::autograd::Function<LeanLayerNorm> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& gamma,
                               const torch::Tensor& beta, double eps) {
    const std::int64_t features = input.size(-1);
    auto [output, mean, rstd] = at::native_layer_norm(input, {features}, gamma, beta, eps);
    // native_layer_norm's rstd has one entry per row; keep it shaped to broadcast over a row.
    std::vector<std::int64_t> row_shape = input.sizes().vec();
    row_shape.back() = 1;
    ctx->save_for_backward({output, rstd.reshape(row_shape), gamma, beta});
    return output;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &output = saved[0], &rstd = saved[1], &gamma = saved[2], &beta = saved[3];
    const torch::Tensor& grad = grads[0];
    const torch::Tensor normalized = (output - beta) / gamma;
    const torch::Tensor grad_normalized = grad * gamma;
    const torch::Tensor grad_input =
        rstd * (grad_normalized - grad_normalized.mean(-1, true) -
                normalized * (grad_normalized * normalized).mean(-1, true));
    const torch::Tensor grad_gamma = (grad * normalized).reshape({-1, output.size(-1)}).sum(0);
    const torch::Tensor grad_beta = grad.reshape({-1, output.size(-1)}).sum(0);
    return {grad_input, grad_gamma, grad_beta, torch::Tensor()};
  }
};

class LeanDropoutMatmul : public torch::autograd::Function<LeanDropoutMatmul> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& probs, const torch::Tensor& keep,
                               double scale, const torch::Tensor& value) {
    ctx->saved_data["scale"] = scale;
    ctx->save_for_backward({probs, keep, value});
    return torch::matmul(probs * keep * scale, value);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &probs = saved[0], &keep = saved[1], &value = saved[2];
    const double scale = ctx->saved_data["scale"].toDouble();
    const torch::Tensor& grad = grads[0];
    const torch::Tensor dropped = probs * keep * scale;  // recomputed instead of kept
    const torch::Tensor grad_value = torch::matmul(dropped.transpose(-2, -1), grad);
    const torch::Tensor grad_probs = torch::matmul(grad, value.transpose(-2, -1)) * keep * scale;
    return {grad_probs, torch::Tensor(), torch::Tensor(), grad_value};
  }
};

}  // namespace

torch::Tensor gelu_derivative_from_output(const torch::Tensor& output, const torch::Tensor& mask) {
  torch::NoGradGuard no_grad;
  // Work in at least fp32; half-precision outputs would lose the inverse near the minimum.
  const torch::Tensor y = output.scalar_type() == torch::kDouble ? output : output.to(torch::kFloat);
  const double y_min = 0.5 * kGeluArgMin * (1.0 + std::erf(kGeluArgMin * kInvSqrt2));
  // gelu''(x*) = phi(x*) (2 - x*^2): the curvature of the quadratic expansion at the minimum.
  const double curvature = kInvSqrt2Pi * std::exp(-0.5 * kGeluArgMin * kGeluArgMin) * (2.0 - kGeluArgMin * kGeluArgMin);
  const torch::Tensor offset = torch::sqrt(torch::clamp_min(y - y_min, 0.0) * (2.0 / curvature));
  // Upper branch: y itself for y >= 0 (exact at 0 and as y grows), the expansion below 0.
  const torch::Tensor upper = torch::where(y >= 0, y, kGeluArgMin + offset);
  // Lower branch: the expansion near the minimum, and for y -> 0- (below x = -2) the tail, where
  // gelu(x) ~ -phi(x), so x ~ -sqrt(-2 log(-y sqrt(2 pi))).
  const torch::Tensor tail =
      -torch::sqrt(torch::clamp_min(-2.0 * torch::log(torch::clamp_min(-y / kInvSqrt2Pi, 1e-30)), 0.0));
  const torch::Tensor lower = torch::where(y > -0.045, torch::minimum(kGeluArgMin - offset, tail), kGeluArgMin - offset);
  torch::Tensor x = torch::where(mask, upper, lower);
  // Within ~0.02 of the minimum the slope is too small for Newton (fp32's rounding of y, divided
  // by the slope, would throw x off); there the quadratic expansion is already the answer to
  // O(distance^3), so those elements keep their guess.
  for (int i = 0; i < 4; ++i) {
    const torch::Tensor slope = gelu_derivative_of(x);
    const torch::Tensor usable = ((x - kGeluArgMin).abs() > 0.02) & (slope.abs() > 1e-12);
    const torch::Tensor step = (gelu_of(x) - y) / torch::where(usable, slope, torch::ones_like(slope));
    x = x - torch::where(usable, step, torch::zeros_like(step));
    x = torch::where(mask, torch::clamp_min(x, kGeluArgMin), torch::clamp_max(x, kGeluArgMin));  // stay on the branch
  }
  return gelu_derivative_of(x).to(output.scalar_type());
}

torch::Tensor lean_gelu(const torch::Tensor& input) { return LeanGelu::apply(input); }

torch::Tensor lean_layer_norm(const torch::Tensor& input, const torch::Tensor& gamma, const torch::Tensor& beta,
                              double eps, double min_abs_gamma) {
  bool tiny_gamma = false;
  {
    torch::NoGradGuard no_grad;
    tiny_gamma = gamma.abs().min().item<double>() < min_abs_gamma;
  }
  if (tiny_gamma) {
    return torch::layer_norm(input, {input.size(-1)}, gamma, beta, eps);
  }
  return LeanLayerNorm::apply(input, gamma, beta, eps);
}

torch::Tensor lean_dropout_matmul(const torch::Tensor& probs, const torch::Tensor& keep, double scale,
                                  const torch::Tensor& value) {
  if (!keep.defined()) return torch::matmul(probs, value);  // no dropout: matmul keeps exactly probs and value
  return LeanDropoutMatmul::apply(probs, keep, scale, value);
}

}  // namespace headroom::models
