#include "executor/grad_cache.h"

#include <vector>

namespace headroom::executor {

int contrastive_layer(const models::Model& model) {
  for (std::size_t i = 0; i < model.layers().size(); ++i) {
    if (model.layers()[i].contrastive) return static_cast<int>(i);
  }
  return -1;
}

double grad_cache_accumulate(const models::Model& model, PlanRunner& runner, std::size_t count,
                             const std::function<models::Batch(std::size_t)>& batch_of, std::int64_t rows,
                             torch::Device device, const std::function<void()>& before_last_backward) {
  using Mode = models::ContrastiveLossSettings::Mode;
  const int id = contrastive_layer(model);
  if (id < 0) throw std::logic_error("grad_cache_accumulate: the model has no contrastive loss");
  const models::Layer& loss_layer = model.layers()[static_cast<std::size_t>(id)];
  models::ContrastiveLossSettings& settings = *loss_layer.contrastive;
  // The settings go back to computing the loss, and the cache goes, however the step ends
  // (running out of memory is what a budget provokes).
  struct Restore {
    models::ContrastiveLossSettings& settings;
    ~Restore() {
      settings.mode = Mode::Loss;
      settings.cached_q = settings.cached_k = torch::Tensor();
      settings.offset = 0;
    }
  } restore{settings};

  auto generator = at::globalContext().defaultGenerator(device);
  std::vector<torch::Tensor> states;
  states.reserve(count);
  settings.mode = Mode::Capture;
  settings.cache_rows = rows;
  settings.cached_q = settings.cached_k = torch::Tensor();
  std::int64_t offset = 0;
  for (std::size_t m = 0; m < count; ++m) {
    runner.set_phase("data", static_cast<int>(m));
    const models::Batch batch = batch_of(m);
    states.push_back(generator.get_state());
    runner.set_phase("embed", static_cast<int>(m));
    settings.offset = offset;
    {
      torch::NoGradGuard no_grad;
      model.forward(batch);
    }
    offset += batch.size();
  }
  if (offset != rows) throw std::logic_error("grad_cache_accumulate: micro-batches do not add up to the batch");
  const torch::Tensor resume = generator.get_state();

  runner.set_phase("loss");
  double value = 0;
  {
    torch::Tensor q = settings.cached_q.requires_grad_(true), k = settings.cached_k.requires_grad_(true);
    settings.cached_q = settings.cached_k = torch::Tensor();
    settings.mode = Mode::Loss;
    torch::Tensor loss = loss_layer.run({q, k}, model.context());
    value = loss.item<double>();
    loss.backward();
    // The embeddings go; their gradients stay for the towers.
    settings.cached_q = q.grad();
    settings.cached_k = k.grad();
  }

  settings.mode = Mode::Surrogate;
  offset = 0;
  for (std::size_t m = 0; m < count; ++m) {
    runner.set_phase("data", static_cast<int>(m));
    const models::Batch batch = batch_of(m);
    generator.set_state(states[m]);
    settings.offset = offset;
    runner.set_phase("forward", static_cast<int>(m));
    torch::Tensor surrogate = runner.forward(batch);
    runner.set_phase("backward", static_cast<int>(m));
    if (m + 1 == count && before_last_backward) before_last_backward();
    surrogate.backward();
    offset += batch.size();
  }
  generator.set_state(resume);
  runner.set_phase("idle");
  return value;
}

}  // namespace headroom::executor
