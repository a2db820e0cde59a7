#include "models/tempo_layers.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace headroom::models {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

constexpr double kInvSqrt2 = 0.70710678118654752;
constexpr double kInvSqrt2Pi = 0.39894228040143268;

double gelu_scalar(double x) { return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2)); }
double gelu_derivative_scalar(double x) {
  return 0.5 * (1.0 + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
}

// GELU's derivative as a function of its output, tabulated once in double precision (each entry's
// input found by bisection on its branch) and read by linear interpolation: one square root and two
// table reads per element, as cheap as the standard backward. Near the minimum the inverse has a
// square-root singularity, so the tables run over s = sqrt(y - y_min), in which both branches are
// smooth. Far down the lower branch (x < -2.5, y -> 0-) s bunches up, so a third table runs over
// t = sqrt(-2 log(-y sqrt(2 pi))), which tends to -x (the Gaussian tail's asymptote).
struct GeluInverseTables {
  static constexpr int kUpper = 8192, kLower = 4096, kTail = 4096;
  static constexpr double kUpperEnd = 8.0;   // above it the derivative is 1 (to ~1e-14)
  static constexpr double kTailStart = -2.5;  // the input where the lower branch hands over to the tail
  static constexpr double kTailEnd = 8.0;    // t beyond it: the derivative is 0 (to ~1e-13)
  double y_min = 0, upper_h = 0, lower_h = 0, lower_end_y = 0, tail_t0 = 0, tail_h = 0;
  std::vector<double> upper, lower, tail;

  GeluInverseTables() {
    y_min = gelu_scalar(kGeluArgMin);
    const auto inverse = [](double y, double lo, double hi) {  // gelu monotone on [lo, hi]
      const bool rising = gelu_scalar(hi) > gelu_scalar(lo);
      for (int i = 0; i < 200 && hi - lo > 1e-15 * std::max(1.0, std::fabs(lo)); ++i) {
        const double mid = 0.5 * (lo + hi);
        ((gelu_scalar(mid) < y) == rising ? lo : hi) = mid;
      }
      return 0.5 * (lo + hi);
    };
    upper_h = std::sqrt(kUpperEnd - y_min) / kUpper;
    for (int k = 0; k <= kUpper; ++k) {
      const double s = k * upper_h;
      upper.push_back(gelu_derivative_scalar(k == 0 ? kGeluArgMin : inverse(y_min + s * s, kGeluArgMin, kUpperEnd + 1)));
    }
    lower_end_y = gelu_scalar(kTailStart);
    lower_h = std::sqrt(lower_end_y - y_min) / kLower;
    for (int k = 0; k <= kLower; ++k) {
      const double s = k * lower_h;
      lower.push_back(gelu_derivative_scalar(k == 0 ? kGeluArgMin : inverse(y_min + s * s, kTailStart - 0.01, kGeluArgMin)));
    }
    tail_t0 = tail_variable(lower_end_y);
    tail_h = (kTailEnd - tail_t0) / kTail;
    for (int k = 0; k <= kTail; ++k) {
      const double t = tail_t0 + k * tail_h;
      const double y = -std::exp(-0.5 * t * t) * kInvSqrt2Pi;
      tail.push_back(gelu_derivative_scalar(inverse(y, -40.0, kTailStart + 0.01)));
    }
  }

  static double tail_variable(double y) { return std::sqrt(-2.0 * std::log(-y / kInvSqrt2Pi)); }

  static double interpolate(const std::vector<double>& table, double position) {
    const auto last = static_cast<double>(table.size() - 1);
    if (position >= last) return table.back();
    const double floor = std::floor(position);
    const auto k = static_cast<std::size_t>(floor);
    const double f = position - floor;
    return table[k] + f * (table[k + 1] - table[k]);
  }

  double derivative(double y, bool upper_branch) const {
    const double s = std::sqrt(std::max(y - y_min, 0.0));
    if (upper_branch) return y >= kUpperEnd ? 1.0 : interpolate(upper, s / upper_h);
    if (y < lower_end_y) return interpolate(lower, s / lower_h);
    if (y >= 0.0) return 0.0;  // x -> -inf (or rounded to 0): no gradient passes
    const double t = tail_variable(y);
    return t >= kTailEnd ? 0.0 : interpolate(tail, std::max(t - tail_t0, 0.0) / tail_h);
  }
};

const GeluInverseTables& gelu_inverse_tables() {
  static const GeluInverseTables tables;
  return tables;
}

// grad * GELU'(x) from (y, mask), element by element on the CPU: no temporaries.
torch::Tensor gelu_backward_from_output_cpu(const torch::Tensor& grad, const torch::Tensor& output,
                                            const torch::Tensor& mask) {
  const torch::Tensor y = output.contiguous();
  const torch::Tensor m = mask.contiguous();
  const torch::Tensor g = grad.defined() ? grad.contiguous() : torch::Tensor();
  torch::Tensor result = torch::empty_like(y);
  const auto& tables = gelu_inverse_tables();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, y.scalar_type(), "tempo_gelu_backward", [&] {
    const scalar_t* y_data = y.data_ptr<scalar_t>();
    const bool* m_data = m.data_ptr<bool>();
    const scalar_t* g_data = g.defined() ? g.data_ptr<scalar_t>() : nullptr;
    scalar_t* out = result.data_ptr<scalar_t>();
    at::parallel_for(0, y.numel(), 16384, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const double d = tables.derivative(static_cast<double>(y_data[i]), m_data[i]);
        out[i] = static_cast<scalar_t>(g_data != nullptr ? static_cast<double>(g_data[i]) * d : d);
      }
    });
  });
  return result;
}

// The same lookup in tensor ops, for devices without the loop above (CUDA).
// Done in slices so its temporaries stay small next to the tensors it works on.
torch::Tensor gelu_derivative_by_tensor_ops(const torch::Tensor& output, const torch::Tensor& mask) {
  const auto& tables = gelu_inverse_tables();
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  const auto on_device = [&](const std::vector<double>& table) {
    return torch::from_blob(const_cast<double*>(table.data()), {static_cast<std::int64_t>(table.size())}, options)
        .to(output.device(), torch::kFloat);
  };
  const torch::Tensor upper = on_device(tables.upper), lower = on_device(tables.lower), tail = on_device(tables.tail);
  const auto lookup = [](const torch::Tensor& table, const torch::Tensor& position) {
    const torch::Tensor p = torch::clamp(position, 0.0, static_cast<double>(table.numel() - 1));
    const torch::Tensor k = torch::clamp_max(p.floor(), static_cast<double>(table.numel() - 2));
    const torch::Tensor index = k.to(torch::kLong);
    return torch::lerp(table.index_select(0, index), table.index_select(0, index + 1), p - k);
  };
  const torch::Tensor y_all = output.reshape({-1});
  const torch::Tensor mask_all = mask.reshape({-1});
  torch::Tensor result = torch::empty(y_all.sizes(), y_all.options());
  constexpr std::int64_t kSlice = 1 << 22;
  for (std::int64_t begin = 0; begin < y_all.numel(); begin += kSlice) {
    const std::int64_t end = std::min(begin + kSlice, y_all.numel());
    const torch::Tensor y = y_all.slice(0, begin, end).to(torch::kFloat);
    const torch::Tensor upper_branch = mask_all.slice(0, begin, end);
    const torch::Tensor s = torch::sqrt(torch::clamp_min(y - tables.y_min, 0.0));
    const torch::Tensor on_upper =
        torch::where(y >= GeluInverseTables::kUpperEnd, torch::ones_like(y), lookup(upper, s / tables.upper_h));
    const torch::Tensor t = torch::sqrt(torch::clamp_min(-2.0 * torch::log(torch::clamp_min(-y / kInvSqrt2Pi, 1e-38)), 0.0));
    const torch::Tensor on_tail = torch::where((y >= 0) | (t >= GeluInverseTables::kTailEnd), torch::zeros_like(y),
                                               lookup(tail, (t - tables.tail_t0) / tables.tail_h));
    const torch::Tensor on_lower = torch::where(y < tables.lower_end_y, lookup(lower, s / tables.lower_h), on_tail);
    result.slice(0, begin, end).copy_(torch::where(upper_branch, on_upper, on_lower));
  }
  return result.reshape(output.sizes());
}

// The loops run in double per element whatever the storage, so they take the half types too
// (bf16-autocast's GELU reads the bfloat16 output of the matrix product before it); the tensor-op
// lookup would hold float32 temporaries of slices of 4M elements (docs/design.md, "Tempo").
bool has_cpu_kernel(const torch::Tensor& t) {
  const auto type = t.scalar_type();
  return t.device().is_cpu() &&
         (type == torch::kFloat || type == torch::kDouble || type == torch::kBFloat16 || type == torch::kHalf);
}

class TempoGelu : public torch::autograd::Function<TempoGelu> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input) {
    torch::Tensor output = torch::gelu(input);
    ctx->save_for_backward({output, input >= kGeluArgMin});
    return output;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    if (has_cpu_kernel(saved[0])) return {gelu_backward_from_output_cpu(grads[0], saved[0], saved[1])};
    return {grads[0] * gelu_derivative_by_tensor_ops(saved[0], saved[1])};
  }
};

// LayerNorm's backward from (y, rstd, gamma, beta), row by row on the CPU. With x^ = (y - beta)/gamma
// and g' = g * gamma: dx = rstd (g' - mean(g') - x^ mean(g' x^)), where g' x^ = g (y - beta) needs
// no division; dgamma = sum over rows of g x^, dbeta = sum of g (per-thread partial sums in double).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> layer_norm_backward_from_output_cpu(
    const torch::Tensor& grad, const torch::Tensor& output, const torch::Tensor& rstd, const torch::Tensor& gamma,
    const torch::Tensor& beta) {
  const std::int64_t features = output.size(-1);
  const std::int64_t rows = output.numel() / features;
  const torch::Tensor y = output.contiguous(), g = grad.contiguous(), r = rstd.contiguous();
  const torch::Tensor gm = gamma.contiguous(), bt = beta.contiguous();
  torch::Tensor grad_input = torch::empty_like(y);
  torch::Tensor grad_gamma = torch::empty_like(gm), grad_beta = torch::empty_like(bt);
  const int threads = at::get_num_threads();
  std::vector<double> partial_gamma(static_cast<std::size_t>(threads * features), 0.0);
  std::vector<double> partial_beta(static_cast<std::size_t>(threads * features), 0.0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, y.scalar_type(), "tempo_layer_norm_backward", [&] {
    const scalar_t *y_data = y.data_ptr<scalar_t>(), *g_data = g.data_ptr<scalar_t>(), *r_data = r.data_ptr<scalar_t>();
    const scalar_t *gamma_data = gm.data_ptr<scalar_t>(), *beta_data = bt.data_ptr<scalar_t>();
    scalar_t* dx = grad_input.data_ptr<scalar_t>();
    const double inv_features = 1.0 / static_cast<double>(features);
    at::parallel_for(0, rows, std::max<std::int64_t>(1, 32768 / features), [&](std::int64_t begin, std::int64_t end) {
      const auto slot = static_cast<std::size_t>(at::get_thread_num() * features);
      double* pg = partial_gamma.data() + slot;
      double* pb = partial_beta.data() + slot;
      for (std::int64_t row = begin; row < end; ++row) {
        const scalar_t* yr = y_data + row * features;
        const scalar_t* gr = g_data + row * features;
        double sum_g_gamma = 0, sum_g_centered = 0;
        for (std::int64_t j = 0; j < features; ++j) {
          const double centered = static_cast<double>(yr[j]) - static_cast<double>(beta_data[j]);
          sum_g_gamma += static_cast<double>(gr[j]) * static_cast<double>(gamma_data[j]);
          sum_g_centered += static_cast<double>(gr[j]) * centered;
          pg[j] += static_cast<double>(gr[j]) * centered;
          pb[j] += static_cast<double>(gr[j]);
        }
        const double mean_g = sum_g_gamma * inv_features, mean_gx = sum_g_centered * inv_features;
        const double rs = static_cast<double>(r_data[row]);
        scalar_t* dxr = dx + row * features;
        for (std::int64_t j = 0; j < features; ++j) {
          const double gamma_j = static_cast<double>(gamma_data[j]);
          const double normalized = (static_cast<double>(yr[j]) - static_cast<double>(beta_data[j])) / gamma_j;
          dxr[j] = static_cast<scalar_t>(rs * (static_cast<double>(gr[j]) * gamma_j - mean_g - normalized * mean_gx));
        }
      }
    });
    scalar_t *dgamma = grad_gamma.data_ptr<scalar_t>(), *dbeta = grad_beta.data_ptr<scalar_t>();
    for (std::int64_t j = 0; j < features; ++j) {
      double sum_gamma = 0, sum_beta = 0;
      for (int t = 0; t < threads; ++t) {
        sum_gamma += partial_gamma[static_cast<std::size_t>(t * features + j)];
        sum_beta += partial_beta[static_cast<std::size_t>(t * features + j)];
      }
      dgamma[j] = static_cast<scalar_t>(sum_gamma / static_cast<double>(gamma_data[j]));
      dbeta[j] = static_cast<scalar_t>(sum_beta);
    }
  });
  return {grad_input, grad_gamma, grad_beta};
}

class TempoLayerNorm : public torch::autograd::Function<TempoLayerNorm> {
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
    if (has_cpu_kernel(output) && gamma.scalar_type() == output.scalar_type()) {
      auto [grad_input, grad_gamma, grad_beta] = layer_norm_backward_from_output_cpu(grad, output, rstd, gamma, beta);
      return {grad_input, grad_gamma, grad_beta, torch::Tensor()};
    }
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

class TempoDropoutMatmul : public torch::autograd::Function<TempoDropoutMatmul> {
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
  if (has_cpu_kernel(output)) return gelu_backward_from_output_cpu(torch::Tensor(), output, mask);
  return gelu_derivative_by_tensor_ops(output, mask).to(output.scalar_type());
}

torch::Tensor gelu_derivative_from_output_by_tensor_ops(const torch::Tensor& output, const torch::Tensor& mask) {
  torch::NoGradGuard no_grad;
  return gelu_derivative_by_tensor_ops(output, mask).to(output.scalar_type());
}

torch::Tensor tempo_gelu(const torch::Tensor& input) { return TempoGelu::apply(input); }

torch::Tensor tempo_layer_norm(const torch::Tensor& input, const torch::Tensor& gamma, const torch::Tensor& beta,
                              double eps, double min_abs_gamma) {
  bool tiny_gamma = false;
  {
    torch::NoGradGuard no_grad;
    tiny_gamma = gamma.abs().min().item<double>() < min_abs_gamma;
  }
  if (tiny_gamma) {
    return torch::layer_norm(input, {input.size(-1)}, gamma, beta, eps);
  }
  return TempoLayerNorm::apply(input, gamma, beta, eps);
}

torch::Tensor tempo_dropout_matmul(const torch::Tensor& probs, const torch::Tensor& keep, double scale,
                                  const torch::Tensor& value) {
  if (!keep.defined()) return torch::matmul(probs, value);  // no dropout: matmul keeps exactly probs and value
  return TempoDropoutMatmul::apply(probs, keep, scale, value);
}

}  // namespace headroom::models
