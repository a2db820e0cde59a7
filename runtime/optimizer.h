#pragma once
// The optimizers a trace can be profiled with and a plan executed with, built the same way for
// both so the state the profiler measured is the state the executor allocates.
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/loss_scaler.h"

namespace headroom::runtime {

// The optimizer `name` writes (core/optimizer_spec.h: "sgd" is SGD with momentum 0.9,
// "sgd(momentum=0)" without, "adam(amsgrad)", "adamw"); only the parameters it is given are
// trained, so a frozen parameter is not passed. Throws InputError for another name. For bfloat16 parameters (the
// bf16 precision) it keeps float32 master weights: each step widens a parameter's gradient to
// float32, lets libtorch's optimizer update the master, and rounds the master into the parameter,
// a piece of at most 2^20 elements at a time, so that little of the float32 gradient exists at once.
//
// With `loss_scaling` (fp16-autocast's step) the optimizer scales: the loss goes into backward times
// a dynamic scale (backward_of), and each step first unscales the accumulated gradients together,
// then steps only when none holds an inf or NaN, then updates the scale (runtime/loss_scaler.h), as
// GradScaler's scale / step / update. The scaler lives on the parameters' device.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const std::vector<torch::Tensor>& parameters,
                                                        std::optional<LossScaleOptions> loss_scaling = std::nullopt);
// The scaler of an optimizer made with loss scaling; nullptr for another.
const LossScaler* loss_scaler_of(const torch::optim::Optimizer& optimizer);
// Backward from `loss` as `optimizer` steps it: scaled where it scales.
void backward_of(const torch::Tensor& loss, const torch::optim::Optimizer& optimizer);
// Zeroes the gradients in place, keeping them allocated between steps as libtorch 1.13's
// zero_grad() does: the planner counts gradients in the step's static memory. libtorch 2.0's
// zero_grad() frees them instead (set_to_none), and a step whose gradients are made during backward
// holds less than its trace says (docs/design.md, "How a plan is executed").
void zero_gradients_kept(torch::optim::Optimizer& optimizer);
// Bytes of the optimizer's state tensors (momentum, Adam moments, master weights where it keeps them,
// and a loss scaler's buffers).
std::int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer);

}  // namespace headroom::runtime
