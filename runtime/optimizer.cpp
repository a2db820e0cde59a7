#include "runtime/optimizer.h"

#include <torch/version.h>

#include "core/errors.h"
#include "runtime/tensor_bytes.h"

namespace headroom::runtime {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const std::vector<torch::Tensor>& parameters) {
  if (name == "sgd") {
    return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.01).momentum(0.9));
  }
  if (name == "adam") return std::make_unique<torch::optim::Adam>(parameters, torch::optim::AdamOptions(1e-3));
  throw core::InputError("unknown optimizer '" + name + "' (known: sgd, adam)");
}

void zero_gradients_kept(torch::optim::Optimizer& optimizer) {
#if TORCH_VERSION_MAJOR >= 2
  optimizer.zero_grad(/*set_to_none=*/false);
#else
  optimizer.zero_grad();
#endif
}

std::int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  std::int64_t total = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state.get())) {
      total += tensor_bytes(adam->exp_avg()) + tensor_bytes(adam->exp_avg_sq()) + tensor_bytes(adam->max_exp_avg_sq());
    } else if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state.get())) {
      total += tensor_bytes(sgd->momentum_buffer());
    }
  }
  return total;
}

}  // namespace headroom::runtime
