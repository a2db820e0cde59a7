#pragma once
// Runs one training step of a model the way a plan says: its micro-batches one after another, each
// mean loss weighted b_i / B so the accumulated gradient is the full batch's, and the checkpointed
// blocks recomputed in backward. Knows at every moment which layer and phase is running, so an
// out-of-memory refusal can be reported where it happened.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/report.h"
#include "models/model.h"

namespace headroom::runtime {
class LossScaler;
}

namespace headroom::executor {

// Where the step is; read when an allocation is refused.
struct Position {
  std::string layer;
  std::string phase = "idle";  // data, forward, recompute, backward, optimizer
  int micro_batch = -1;
};

// Where a technique keeps a layer's parameters elsewhere between its uses (a stage-3 worker gathers
// them from their owners: data_parallel.h), what the runner calls around the layer's work.
class LayerParameterHooks {
 public:
  virtual ~LayerParameterHooks() = default;
  // A micro-batch's forward is about to begin (not a contrastive step's passes, which call only the
  // hooks below).
  virtual void begin_micro_batch() {}
  // Before the layer's forward and its recompute.
  virtual void before(int layer) = 0;
  // Before its backward, outside a checkpointed block (whose recompute comes first).
  virtual void before_backward(int layer) = 0;
  // After its forward (not its recompute, whose backward follows).
  virtual void after_forward(int layer) = 0;
};

class PlanRunner {
 public:
  // `checkpointed_blocks` are model block ids; each must read one tensor from outside besides the
  // batch's further inputs and be read from outside only through its last layer (throws InputError
  // otherwise).
  // `position` is written as the step runs; it belongs to the caller so it outlives the runner when
  // an out-of-memory error unwinds the step.
  PlanRunner(const models::Model& model, const std::vector<int>& checkpointed_blocks, Position& position);
  // Autograd nodes keep pointers to the runner and its spans.
  PlanRunner(const PlanRunner&) = delete;
  PlanRunner& operator=(const PlanRunner&) = delete;

  // Forward (checkpointing as planned) and backward of every micro-batch; gradients accumulate.
  // Returns the loss of the whole batch (the weighted sum of micro-batch losses).
  double accumulate(const std::vector<models::Batch>& micro_batches, std::int64_t global_batch);
  // One micro-batch (number `index` of the step): forward, backward with loss weight b / B.
  double run_micro_batch(const models::Batch& batch, int index, std::int64_t global_batch);

  // The loss of one micro-batch, with the checkpointed blocks run without keeping activations.
  torch::Tensor forward(const models::Batch& batch);

  // Backward from each micro-batch's weighted loss times the scaler's scale (fp16-autocast's step,
  // runtime::make_optimizer with loss scaling); the optimizer unscales the sum. nullptr: unscaled.
  void set_loss_scaler(const runtime::LossScaler* scaler) { loss_scaler_ = scaler; }

  // Null: the layers' parameters stay where they are.
  void set_layer_hooks(LayerParameterHooks* hooks) { hooks_ = hooks; }

  const Position& position() const { return position_; }
  void set_phase(std::string phase, int micro_batch = -1);

 private:
  struct Span {
    int first, last, input;
  };
  torch::Tensor run_block(const Span& span, const torch::Tensor& input, const models::Batch& batch, bool recomputing);
  friend struct CheckpointedBlock;

  const models::Model& model_;
  std::vector<const Span*> span_starting_at_;  // per layer: the checkpointed span that starts there
  std::vector<Span> spans_;
  Position& position_;
  const runtime::LossScaler* loss_scaler_ = nullptr;
  LayerParameterHooks* hooks_ = nullptr;
};

// Micro-batches of the given sizes, made by the model's generator from seeds derived from `seed`,
// moved to `device`. The full batch is their concatenation.
// `first`: the index of the first one among a larger batch's micro-batches (a data-parallel
// worker's share), so each draws the same data wherever it runs.
std::vector<models::Batch> make_micro_batches(const models::Model& model, const std::vector<std::int64_t>& sizes,
                                              std::uint64_t seed, torch::Device device, std::size_t first = 0);
using models::concatenate;

// max over tensors of |a - b|_inf / |b|_inf (b the reference).
double max_relative_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b);
std::vector<torch::Tensor> gradients_of(const std::vector<torch::Tensor>& parameters);
// gradients_of, the parameters' gradients then cleared: a reference pass's, taken away.
std::vector<torch::Tensor> take_gradients(const std::vector<torch::Tensor>& parameters);

// Below fp32 the plan's gradients and the full batch's in the plan's precision round differently (a
// bfloat16 gradient sums each micro-batch's rounded share): both are set against the full batch in
// float32 on the same weights (bfloat16 ones widened exactly) into `check`. `full_batch` runs the
// full batch on `model`, set to fp32 for it, and takes its gradients; the precision comes back
// however the pass ends, with no gradients left.
void compare_with_float32(models::Model& model, const std::function<std::vector<torch::Tensor>()>& full_batch,
                          const std::vector<torch::Tensor>& plan_gradients, const std::vector<torch::Tensor>& full,
                          core::GradientCheck& check);

}  // namespace headroom::executor
