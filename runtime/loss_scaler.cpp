#include "runtime/loss_scaler.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "runtime/tensor_bytes.h"

namespace headroom::runtime {

LossScaler::LossScaler(c10::Device device, LossScaleOptions options)
    : options_(options),
      scale_(at::full({1}, options.initial_scale, at::TensorOptions().dtype(at::kFloat).device(device))),
      growth_tracker_(at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device))),
      found_inf_(at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device))) {}

// As GradScaler: times the float32 scale, so a float16 loss is promoted rather than overflowing
// (65536 is past float16's largest).
at::Tensor LossScaler::scale(const at::Tensor& loss) const { return loss * scale_; }

bool LossScaler::unscale(const std::vector<at::Tensor>& gradients) {
  c10::NoGradGuard no_grad;
  found_inf_.zero_();
  const at::Tensor inverse = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  // As the kernel reads it: one float32 value, whatever a gradient's shape or dtype.
  const float inverse_value = inverse.item<float>();
  std::vector<at::Tensor> defined;
  for (const auto& g : gradients) {
    if (g.defined()) defined.push_back(g);
  }
  if (scale_.is_cuda()) {
    at::_amp_foreach_non_finite_check_and_unscale_(defined, found_inf_, inverse);
  } else {
    for (auto& g : defined) {
      // The check before the multiply, as the kernel does: inf times a small scale stays inf,
      // but a NaN's test is the same either way.
      if (!at::isfinite(g).all().item<bool>()) found_inf_.fill_(1.0);
      g.mul_(inverse_value);
    }
  }
  const bool clean = found_inf_.item<float>() == 0.0f;
  if (!clean) ++skipped_;
  return clean;
}

void LossScaler::update() {
  c10::NoGradGuard no_grad;
  if (scale_.is_cuda()) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor, options_.backoff_factor,
                           options_.growth_interval);
    return;
  }
  // The products in double, rounded to float32 once, as the kernel computes them.
  const double scale = scale_.item<double>();
  if (found_inf_.item<float>() != 0.0f) {
    scale_.fill_(static_cast<float>(scale * options_.backoff_factor));
    growth_tracker_.zero_();
    return;
  }
  const std::int64_t clean_steps = growth_tracker_.item<int>() + 1;
  if (clean_steps == options_.growth_interval) {
    // Grown only while it stays finite, as the kernel does.
    const auto grown = static_cast<float>(scale * options_.growth_factor);
    if (std::isfinite(grown)) scale_.fill_(grown);
    growth_tracker_.zero_();
  } else {
    growth_tracker_.fill_(static_cast<int>(clean_steps));
  }
}

double LossScaler::current_scale() const { return scale_.item<double>(); }

std::int64_t LossScaler::buffer_bytes() const {
  return tensor_bytes(scale_) + tensor_bytes(growth_tracker_) + tensor_bytes(found_inf_);
}

}  // namespace headroom::runtime
