#include "runtime/optimizer.h"

#include <torch/version.h>

#include <algorithm>

#include "core/errors.h"
#include "core/optimizer_spec.h"
#include "runtime/tensor_bytes.h"

namespace headroom::runtime {

namespace {

std::unique_ptr<torch::optim::Optimizer> make_float_optimizer(const core::OptimizerSpec& spec,
                                                              const std::vector<torch::Tensor>& parameters) {
  switch (spec.kind) {
    case core::OptimizerSpec::Kind::Sgd:
      return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.01).momentum(spec.momentum));
    case core::OptimizerSpec::Kind::Adam:
      return std::make_unique<torch::optim::Adam>(parameters, torch::optim::AdamOptions(1e-3).amsgrad(spec.amsgrad));
    case core::OptimizerSpec::Kind::AdamW:
      return std::make_unique<torch::optim::AdamW>(parameters, torch::optim::AdamWOptions(1e-3).amsgrad(spec.amsgrad));
  }
  throw core::InputError("unknown optimizer '" + spec.text() + "'");
}

std::int64_t float_state_bytes(torch::optim::Optimizer& optimizer) {
  std::int64_t total = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state.get())) {
      total += tensor_bytes(adam->exp_avg()) + tensor_bytes(adam->exp_avg_sq()) + tensor_bytes(adam->max_exp_avg_sq());
    } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state.get())) {
      total += tensor_bytes(adamw->exp_avg()) + tensor_bytes(adamw->exp_avg_sq()) + tensor_bytes(adamw->max_exp_avg_sq());
    } else if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state.get())) {
      total += tensor_bytes(sgd->momentum_buffer());
    }
  }
  return total;
}

// Low-precision parameters trained through float32 master copies (Micikevicius et al. 2018): the
// parameters are what the model computes with and accumulates gradients into (zero_grad, the
// all-reduce and the executor see them in param_groups); the masters and libtorch's own optimizer
// arithmetic on them are what keep small updates from rounding away. Each master is stepped in
// pieces of at most kPieceElements, each piece with an optimizer of its own, so the float32
// gradient and the optimizer's temporaries exist for one piece at a time: a vocabulary's embedding
// (bert's 7.8M elements) would otherwise need 94 MiB of them at once, more than the activations
// bf16 saves. The optimizers' arithmetic is elementwise, so pieces update exactly as the whole would.
class MasterWeightOptimizer : public torch::optim::Optimizer {
 public:
  static constexpr std::int64_t kPieceElements = std::int64_t{1} << 20;

  MasterWeightOptimizer(const core::OptimizerSpec& spec, const std::vector<torch::Tensor>& parameters)
      : Optimizer(parameters, std::make_unique<torch::optim::AdamOptions>(1e-3)) {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      masters_.push_back(parameters[i].detach().to(torch::kFloat32).contiguous().clone());
      const torch::Tensor flat = masters_.back().view(-1);
      for (std::int64_t offset = 0; offset < flat.numel(); offset += kPieceElements) {
        const std::int64_t length = std::min(kPieceElements, flat.numel() - offset);
        Piece piece{i, offset, flat.narrow(0, offset, length), nullptr};
        piece.optimizer = make_float_optimizer(spec, {piece.master});
        pieces_.push_back(std::move(piece));
      }
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
    torch::Tensor flat;  // the current parameter's gradient, flattened once (a copy only where it is strided)
    for (std::size_t k = 0; k < pieces_.size(); ++k) {
      Piece& piece = pieces_[k];
      const torch::Tensor& gradient = params[piece.parameter].grad();
      if (!gradient.defined()) continue;
      if (piece.offset == 0) flat = gradient.reshape(-1);
      piece.master.mutable_grad() = flat.narrow(0, piece.offset, piece.master.numel()).to(torch::kFloat32);
      piece.optimizer->step();
      piece.master.mutable_grad() = torch::Tensor();
      // The parameter takes its master's value once all its pieces have stepped.
      if (k + 1 == pieces_.size() || pieces_[k + 1].parameter != piece.parameter) {
        params[piece.parameter].copy_(masters_[piece.parameter]);
        flat = torch::Tensor();
      }
    }
    return loss;
  }

  std::int64_t state_bytes() {
    std::int64_t total = 0;
    for (const auto& m : masters_) total += tensor_bytes(m);
    for (auto& piece : pieces_) total += float_state_bytes(*piece.optimizer);
    return total;
  }

 private:
  struct Piece {
    std::size_t parameter;  // index in the parameter group and in masters_
    std::int64_t offset;    // in the flattened parameter
    torch::Tensor master;   // a view of the master
    std::unique_ptr<torch::optim::Optimizer> optimizer;
  };
  std::vector<torch::Tensor> masters_;
  std::vector<Piece> pieces_;
};

// fp16-autocast's step (runtime/loss_scaler.h): the parameters (float32) are its group, so
// zero_grad, the all-reduce and the executor see them as any optimizer's; the optimizer that
// updates them runs only on steps whose unscaled gradients are all finite.
class LossScaledOptimizer : public torch::optim::Optimizer {
 public:
  LossScaledOptimizer(std::unique_ptr<torch::optim::Optimizer> inner, const std::vector<torch::Tensor>& parameters,
                      LossScaleOptions options)
      : Optimizer(parameters, std::make_unique<torch::optim::AdamOptions>(1e-3)),
        inner_(std::move(inner)),
        scaler_(parameters.empty() ? torch::Device(torch::kCPU) : parameters.front().device(), options) {}

  torch::Tensor step(LossClosure closure) override {
    torch::Tensor loss;
    if (closure) {
      torch::AutoGradMode enabled(true);
      loss = closure();
    }
    std::vector<torch::Tensor> gradients;
    for (const auto& p : param_groups().front().params()) gradients.push_back(p.grad());
    if (scaler_.unscale(gradients)) inner_->step();
    scaler_.update();
    return loss;
  }

  const LossScaler& scaler() const { return scaler_; }
  torch::optim::Optimizer& inner() { return *inner_; }

 private:
  std::unique_ptr<torch::optim::Optimizer> inner_;
  LossScaler scaler_;
};

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const std::vector<torch::Tensor>& parameters,
                                                        std::optional<LossScaleOptions> loss_scaling) {
  const core::OptimizerSpec spec = core::parse_optimizer_spec(name);
  if (loss_scaling) {
    return std::make_unique<LossScaledOptimizer>(make_optimizer(name, parameters), parameters, *loss_scaling);
  }
  const bool low_precision = std::any_of(parameters.begin(), parameters.end(), [](const torch::Tensor& p) {
    return p.scalar_type() == torch::kBFloat16 || p.scalar_type() == torch::kHalf;
  });
  if (low_precision) {
    return std::make_unique<MasterWeightOptimizer>(spec, parameters);
  }
  return make_float_optimizer(spec, parameters);
}

void zero_gradients_kept(torch::optim::Optimizer& optimizer) {
#if TORCH_VERSION_MAJOR >= 2
  optimizer.zero_grad(/*set_to_none=*/false);
#else
  optimizer.zero_grad();
#endif
}

const LossScaler* loss_scaler_of(const torch::optim::Optimizer& optimizer) {
  const auto* scaled = dynamic_cast<const LossScaledOptimizer*>(&optimizer);
  return scaled != nullptr ? &scaled->scaler() : nullptr;
}

void backward_of(const torch::Tensor& loss, const torch::optim::Optimizer& optimizer) {
  if (const LossScaler* scaler = loss_scaler_of(optimizer)) {
    scaler->scale(loss).backward();
  } else {
    loss.backward();
  }
}

std::int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  if (auto* scaled = dynamic_cast<LossScaledOptimizer*>(&optimizer)) {
    return optimizer_state_bytes(scaled->inner()) + scaled->scaler().buffer_bytes();
  }
  if (auto* master = dynamic_cast<MasterWeightOptimizer*>(&optimizer)) return master->state_bytes();
  return float_state_bytes(optimizer);
}

}  // namespace headroom::runtime
