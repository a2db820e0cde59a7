#pragma once
// The optimizers a trace can be profiled with and a plan executed with, built the same way for
// both so the state the profiler measured is the state the executor allocates.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace headroom::runtime {

// "sgd" (momentum 0.9) or "adam". Throws InputError for another name. For bfloat16 parameters (the
// bf16 precision) it keeps float32 master weights: each step widens a parameter's gradient to
// float32, lets libtorch's optimizer update the master, and rounds the master into the parameter,
// a piece of at most 2^20 elements at a time, so that little of the float32 gradient exists at once.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const std::vector<torch::Tensor>& parameters);
// Zeroes the gradients in place, keeping them allocated between steps as libtorch 1.13's
// zero_grad() does: the planner counts gradients in the step's static memory. libtorch 2.0's
// zero_grad() frees them instead (set_to_none), which on an H200 made bert large's step hold
// 1.2 GiB less than its trace said.
void zero_gradients_kept(torch::optim::Optimizer& optimizer);
// Bytes of the optimizer's state tensors (momentum, Adam moments, and master weights where it keeps them).
std::int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer);

}  // namespace headroom::runtime
