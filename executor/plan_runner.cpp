#include "executor/plan_runner.h"

#include <algorithm>

#include "core/errors.h"
#include "runtime/loss_scaler.h"

namespace headroom::executor {

// A checkpointed block as one autograd node: forward runs the block without grad and keeps only its
// input and the RNG state; backward restores the RNG state (so dropout draws the same masks), runs
// the block again with grad and backpropagates through it.
struct CheckpointedBlock : public torch::autograd::Function<CheckpointedBlock> {
  // `anchor` is an empty tensor that requires grad: the block's parameters are not inputs of this
  // node, so without it a block whose input needs no gradient (the model input) would never have
  // its backward called and its parameters would get no gradient.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor input, torch::Tensor anchor,
                               PlanRunner* runner, const PlanRunner::Span* span, const models::Batch* batch) {
    ctx->saved_data["runner"] = reinterpret_cast<std::int64_t>(runner);
    ctx->saved_data["span"] = reinterpret_cast<std::int64_t>(span);
    ctx->saved_data["batch"] = reinterpret_cast<std::int64_t>(batch);
    ctx->saved_data["rng"] = at::globalContext().defaultGenerator(input.device()).get_state();
    ctx->save_for_backward({input});
    return runner->run_block(*span, input, *batch, false);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto* runner = reinterpret_cast<PlanRunner*>(ctx->saved_data["runner"].toInt());
    const auto* span = reinterpret_cast<const PlanRunner::Span*>(ctx->saved_data["span"].toInt());
    const auto* batch = reinterpret_cast<const models::Batch*>(ctx->saved_data["batch"].toInt());
    const torch::Tensor saved = ctx->get_saved_variables()[0];
    const torch::Tensor input = saved.detach().requires_grad_(saved.requires_grad());

    // The forward's RNG state for the recompute, and the current one back afterwards, also when
    // the recompute throws (running out of memory is what a budget provokes).
    struct RngRestore {
      at::Generator generator;
      torch::Tensor resume;
      ~RngRestore() { generator.set_state(resume); }
    };
    torch::Tensor output;
    const int micro_batch = runner->position().micro_batch;
    {
      auto generator = at::globalContext().defaultGenerator(saved.device());
      RngRestore restore{generator, generator.get_state()};
      generator.set_state(ctx->saved_data["rng"].toTensor());
      runner->set_phase("recompute", micro_batch);
      torch::AutoGradMode grad(true);
      output = runner->run_block(*span, input, *batch, true);
    }
    runner->set_phase("backward", micro_batch);
    // A block with nothing to train that reads no gradient-carrying input has no backward.
    if (output.requires_grad()) torch::autograd::backward({output}, {grad_outputs[0]});
    // The node outlives its backward until the whole graph goes: its saved RNG state would stay
    // through every earlier block's backward, where the plan counts it no more.
    ctx->saved_data.erase("rng");
    return {input.requires_grad() ? input.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

PlanRunner::PlanRunner(const models::Model& model, const std::vector<int>& checkpointed_blocks, Position& position)
    : model_(model), span_starting_at_(model.layers().size(), nullptr), position_(position) {
  const auto& layers = model.layers();
  spans_.reserve(checkpointed_blocks.size());
  for (const int block : checkpointed_blocks) {
    Span span{-1, -1, models::kModelInput};
    for (std::size_t i = 0; i < layers.size(); ++i) {
      if (layers[i].block != block) continue;
      if (span.first < 0) span.first = static_cast<int>(i);
      span.last = static_cast<int>(i);
    }
    if (span.first < 0) throw core::InputError("the model has no block " + std::to_string(block) + " to checkpoint");
    std::vector<int> external;
    for (int i = span.first; i <= span.last; ++i) {
      for (const int input : layers[static_cast<std::size_t>(i)].inputs) {
        // A further input of the batch is read from the batch again when the block recomputes.
        if (core::is_further_input(input)) continue;
        if (input < span.first && std::find(external.begin(), external.end(), input) == external.end()) {
          external.push_back(input);
        }
      }
      if (i < span.last && model.last_readers()[static_cast<std::size_t>(i)] > span.last) {
        throw core::InputError("block " + std::to_string(block) + " cannot be checkpointed: a later layer reads " +
                               layers[static_cast<std::size_t>(i)].name);
      }
    }
    if (external.size() != 1 || external.front() == models::kTargetInput) {
      throw core::InputError("block " + std::to_string(block) + " cannot be checkpointed: it must read exactly one "
                             "earlier layer's output or the model input besides the batch's further inputs");
    }
    span.input = external.front();
    spans_.push_back(span);
  }
  for (const auto& span : spans_) span_starting_at_[static_cast<std::size_t>(span.first)] = &span;
}

void PlanRunner::set_phase(std::string phase, int micro_batch) {
  position_.phase = std::move(phase);
  position_.micro_batch = micro_batch;
  if (position_.phase != "forward" && position_.phase != "recompute" && position_.phase != "backward") {
    position_.layer.clear();
  }
}

torch::Tensor PlanRunner::run_block(const Span& span, const torch::Tensor& input, const models::Batch& batch,
                                    bool recomputing) {
  const auto& layers = model_.layers();
  const auto& last_readers = model_.last_readers();
  models::RunContext context = model_.context();
  context.recomputing = recomputing;
  std::vector<torch::Tensor> outputs(layers.size());
  // A block that reads the model input reads it from the batch (it needs no gradient).
  if (span.input >= 0) outputs[static_cast<std::size_t>(span.input)] = input;
  for (int i = span.first; i <= span.last; ++i) {
    const auto& layer = layers[static_cast<std::size_t>(i)];
    position_.layer = layer.name;
    if (hooks_ != nullptr) hooks_->before(i);
    torch::Tensor out = layer.run(models::gather_inputs(layer, batch, outputs), context);
    if (hooks_ != nullptr && !recomputing) hooks_->after_forward(i);
    outputs[static_cast<std::size_t>(i)] = std::move(out);
    for (const int j : layer.inputs) {
      if (j > span.input && last_readers[static_cast<std::size_t>(j)] == i) outputs[static_cast<std::size_t>(j)] = torch::Tensor();
    }
  }
  return std::move(outputs[static_cast<std::size_t>(span.last)]);
}

torch::Tensor PlanRunner::forward(const models::Batch& batch) {
  const auto& layers = model_.layers();
  const auto& last_readers = model_.last_readers();
  const models::RunContext context = model_.context();
  std::vector<torch::Tensor> outputs(layers.size());
  for (std::size_t i = 0; i < layers.size();) {
    const Span* span = span_starting_at_[i];
    const auto& layer = layers[i];
    torch::Tensor out;
    std::size_t done;
    if (span != nullptr) {
      const torch::Tensor& input = span->input >= 0 ? outputs[static_cast<std::size_t>(span->input)] : batch.input;
      static const torch::Tensor anchor = torch::empty({0}).requires_grad_(true);
      out = CheckpointedBlock::apply(input, anchor, this, span, &batch);
      done = static_cast<std::size_t>(span->last);
    } else {
      position_.layer = layer.name;
      if (hooks_ != nullptr) hooks_->before(static_cast<int>(i));
      out = layer.run(models::gather_inputs(layer, batch, outputs), context);
      if (hooks_ != nullptr) hooks_->after_forward(static_cast<int>(i));
      done = i;
    }
    // Mark where backward reaches this output, so a refusal there names the layer; its gradient
    // arriving is where the layer's backward begins (a checkpointed block's recompute calls the hooks).
    const std::string name = layers[done].name;
    if (out.requires_grad()) {
      LayerParameterHooks* hooks = span == nullptr ? hooks_ : nullptr;
      const int at = static_cast<int>(done);
      out.register_hook([this, name, hooks, at](torch::Tensor grad) {
        position_.layer = name;
        if (hooks != nullptr) hooks->before_backward(at);
        return grad;
      });
    }
    outputs[done] = std::move(out);
    for (std::size_t k = i; k <= done; ++k) {
      for (const int j : layers[k].inputs) {
        if (j >= 0 && last_readers[static_cast<std::size_t>(j)] <= static_cast<int>(done)) outputs[static_cast<std::size_t>(j)] = torch::Tensor();
      }
    }
    i = done + 1;
  }
  return std::move(outputs.back());
}

double PlanRunner::run_micro_batch(const models::Batch& batch, int index, std::int64_t global_batch) {
  const double weight = static_cast<double>(batch.size()) / static_cast<double>(global_batch);
  set_phase("forward", index);
  if (hooks_ != nullptr) hooks_->begin_micro_batch();
  torch::Tensor loss = forward(batch) * weight;
  set_phase("backward", index);
  if (loss_scaler_ != nullptr) {
    loss_scaler_->scale(loss).backward();
  } else {
    loss.backward();
  }
  return loss.item<double>();
}

double PlanRunner::accumulate(const std::vector<models::Batch>& micro_batches, std::int64_t global_batch) {
  double total = 0;
  for (std::size_t m = 0; m < micro_batches.size(); ++m) {
    total += run_micro_batch(micro_batches[m], static_cast<int>(m), global_batch);
  }
  set_phase("idle");
  return total;
}

std::vector<models::Batch> make_micro_batches(const models::Model& model, const std::vector<std::int64_t>& sizes,
                                              std::uint64_t seed, torch::Device device, std::size_t first) {
  std::vector<models::Batch> batches;
  for (std::size_t m = 0; m < sizes.size(); ++m) {
    models::Batch b = model.make_batch(sizes[m], seed * 1000003 + first + m);
    batches.push_back(b.to(device));
  }
  return batches;
}

std::vector<torch::Tensor> gradients_of(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) grads.push_back(p.grad().defined() ? p.grad().detach().clone() : torch::zeros_like(p));
  return grads;
}

std::vector<torch::Tensor> take_gradients(const std::vector<torch::Tensor>& parameters) {
  auto gradients = gradients_of(parameters);
  for (auto p : parameters) p.mutable_grad() = torch::Tensor();
  return gradients;
}

void compare_with_float32(models::Model& model, const std::function<std::vector<torch::Tensor>()>& full_batch,
                          const std::vector<torch::Tensor>& plan_gradients, const std::vector<torch::Tensor>& full,
                          core::GradientCheck& check) {
  struct PrecisionRestored {
    models::Model& model;
    core::Precision precision;
    ~PrecisionRestored() {
      for (auto p : model.parameters()) p.mutable_grad() = torch::Tensor();
      model.set_precision(precision);
    }
  } restored{model, model.context().precision};
  model.set_precision(core::Precision::Fp32);
  const auto exact = full_batch();
  const auto widened = [](const std::vector<torch::Tensor>& gradients) {
    std::vector<torch::Tensor> out;
    for (const auto& g : gradients) out.push_back(g.defined() ? g.to(torch::kFloat) : g);
    return out;
  };
  check.float32_max_rel_diff = max_relative_difference(widened(plan_gradients), exact);
  check.reference_float32_max_rel_diff = max_relative_difference(widened(full), exact);
}

double max_relative_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double scale = b[i].abs().max().item<double>();
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    worst = std::max(worst, scale > 0 ? diff / scale : diff);
  }
  return worst;
}

}  // namespace headroom::executor
