#pragma once
// Dynamic loss scaling for fp16 autocast, the algorithm of PyTorch's GradScaler: the loss is
// multiplied by a scale before backward so small gradients survive float16; once the step's
// micro-batches have accumulated, the gradients are unscaled together and checked for inf/NaN;
// a step with any is skipped and the scale backs off, and after `growth_interval` clean steps in a
// row the scale grows. On CUDA the checks and updates are ATen's own kernels
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_); libtorch 1.13 has them for CUDA
// only, so on the CPU (where the tests run) the same arithmetic runs as tensor operations.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

namespace headroom::runtime {

struct LossScaleOptions {
  double initial_scale = 65536.0;  // 2^16, GradScaler's default
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(c10::Device device, LossScaleOptions options = {});

  // The loss times the current scale, for backward.
  at::Tensor scale(const at::Tensor& loss) const;
  // Divides every defined gradient by the scale, in place, and records whether any element of any
  // of them is inf or NaN. Returns true when the step may be taken.
  bool unscale(const std::vector<at::Tensor>& gradients);
  // After the step (taken or skipped): backs off on inf/NaN, grows after growth_interval clean steps.
  void update();

  double current_scale() const;
  std::int64_t skipped_steps() const { return skipped_; }
  // What the scaler keeps on the device: the scale, the growth tracker and the inf flag.
  std::int64_t buffer_bytes() const;

 private:
  LossScaleOptions options_;
  at::Tensor scale_;           // float32 [1]
  at::Tensor growth_tracker_;  // int32 [1]: clean steps since the last change
  at::Tensor found_inf_;       // float32 [1]: 1 when the last unscale met inf/NaN
  std::int64_t skipped_ = 0;
};

}  // namespace headroom::runtime
