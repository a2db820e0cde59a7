#include "runtime/optimizer.h"

#include <torch/version.h>

#include <algorithm>

#include "core/errors.h"
#include "runtime/tensor_bytes.h"

namespace headroom::runtime {

namespace {

std::unique_ptr<torch::optim::Optimizer> make_float_optimizer(const std::string& name,
                                                              const std::vector<torch::Tensor>& parameters) {
  if (name == "sgd") {
    return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.01).momentum(0.9));
  }
  if (name == "adam") return std::make_unique<torch::optim::Adam>(parameters, torch::optim::AdamOptions(1e-3));
  throw core::InputError("unknown optimizer '" + name + "' (known: sgd, adam)");
}

std::int64_t float_state_bytes(torch::optim::Optimizer& optimizer) {
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

// Low-precision parameters trained through float32 master copies (Micikevicius et al. 2018): the
// parameters are what the model computes with and accumulates gradients into (zero_grad, the
// all-reduce and the executor see them in param_groups); the masters and libtorch's own optimizer
// arithmetic on them are what keep small updates from rounding away.
class MasterWeightOptimizer : public torch::optim::Optimizer {
 public:
  MasterWeightOptimizer(const std::string& name, const std::vector<torch::Tensor>& parameters)
      : Optimizer(parameters, std::make_unique<torch::optim::AdamOptions>(1e-3)) {
    torch::NoGradGuard no_grad;
    for (const auto& p : parameters) {
      masters_.push_back(p.detach().to(torch::kFloat32).clone());
      // One optimizer per parameter: stepping them in turn bounds the float32 gradients alive at
      // once to one parameter's.
      per_master_.push_back(make_float_optimizer(name, {masters_.back()}));
    }
  }

  torch::Tensor step(LossClosure closure) override {
    torch::Tensor loss;
    if (closure) {
      torch::AutoGradMode enabled(true);
      loss = closure();
    }
    torch::NoGradGuard no_grad;
    auto& params = param_groups().front().params();
    for (std::size_t i = 0; i < params.size(); ++i) {
      torch::Tensor& p = params[i];
      if (!p.grad().defined()) continue;
      masters_[i].mutable_grad() = p.grad().to(torch::kFloat32);
      per_master_[i]->step();
      masters_[i].mutable_grad() = torch::Tensor();
      p.copy_(masters_[i]);
    }
    return loss;
  }

  std::int64_t state_bytes() {
    std::int64_t total = 0;
    for (const auto& m : masters_) total += tensor_bytes(m);
    for (auto& o : per_master_) total += float_state_bytes(*o);
    return total;
  }

 private:
  std::vector<torch::Tensor> masters_;
  std::vector<std::unique_ptr<torch::optim::Optimizer>> per_master_;
};

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const std::vector<torch::Tensor>& parameters) {
  const bool low_precision = std::any_of(parameters.begin(), parameters.end(), [](const torch::Tensor& p) {
    return p.scalar_type() == torch::kBFloat16 || p.scalar_type() == torch::kHalf;
  });
  if (low_precision) {
    if (name != "sgd" && name != "adam") make_float_optimizer(name, parameters);  // its error, before masters are made
    return std::make_unique<MasterWeightOptimizer>(name, parameters);
  }
  return make_float_optimizer(name, parameters);
}

void zero_gradients_kept(torch::optim::Optimizer& optimizer) {
#if TORCH_VERSION_MAJOR >= 2
  optimizer.zero_grad(/*set_to_none=*/false);
#else
  optimizer.zero_grad();
#endif
}

std::int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  if (auto* master = dynamic_cast<MasterWeightOptimizer*>(&optimizer)) return master->state_bytes();
  return float_state_bytes(optimizer);
}

}  // namespace headroom::runtime
