#pragma once
// The optimizers a trace can be profiled with and a plan executed with, built the same way for
// both so the state the profiler measured is the state the executor allocates.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace headroom::runtime {

// "sgd" (momentum 0.9) or "adam". Throws InputError for another name.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const std::vector<torch::Tensor>& parameters);
// Bytes of the optimizer's state tensors (momentum, Adam moments).
std::int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer);

}  // namespace headroom::runtime
