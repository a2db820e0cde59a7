#pragma once
// A model as an ordered list of named layers with declared inputs (skip edges allowed), grouped
// into blocks. The profiler measures layer by layer, the planner reasons over the same list, and
// later strategies swap a layer's implementation by name.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/step_choice.h"
#include "core/trace.h"
#include "models/config.h"
#include "models/contrastive_loss.h"

namespace headroom::models {

using core::is_model_input;
using core::kModelInput;
using core::kTargetInput;
using core::model_input_id;

struct RunContext {
  bool training = true;  // dropout active, BatchNorm uses batch statistics
  // Dropout can be switched off alone, so two runs that must compute the same function (the
  // executor's gradient check) can while BatchNorm still normalizes with batch statistics.
  bool dropout = true;
  // A checkpointed block running again in backward: the forward already counted this batch into
  // BatchNorm's running statistics, so it must not count it twice.
  bool recomputing = false;
  // Each layer's forward runs in an autocast region of this precision (core/precision.h); the
  // backward, which autograd runs after the forward returned, is outside it, as in PyTorch.
  core::Precision precision = core::Precision::Fp32;
};

using LayerForward = std::function<torch::Tensor(const std::vector<torch::Tensor>& inputs, const RunContext&)>;

struct Layer {
  std::string name;
  std::string kind;
  std::vector<int> inputs;  // earlier layer ids, model inputs (model_input_id) or kTargetInput
  int block = -1;
  LayerForward forward;
  // Tempo's memory-lean variant of the same function (models/tempo_layers.h), where there is one.
  LayerForward tempo_forward;
  bool tempo = false;  // run tempo_forward instead of forward
  std::vector<torch::Tensor> parameters;  // the layer's own
  // Set for a contrastive loss layer (zoo `clip`): how it runs, shared with the step's driver.
  std::shared_ptr<ContrastiveLossSettings> contrastive;

  bool has_tempo_variant() const { return static_cast<bool>(tempo_forward); }
  // The forward (or Tempo forward) in the context's precision.
  torch::Tensor run(const std::vector<torch::Tensor>& inputs, const RunContext& context) const;
};

struct Batch {
  torch::Tensor input;
  torch::Tensor target;
  // A model with several inputs (token ids and an attention mask): those after the first, in order;
  // each with the batch along dimension 0.
  std::vector<torch::Tensor> further_inputs;
  std::int64_t size() const { return input.size(0); }
  std::int64_t bytes() const;
  Batch to(torch::Device device) const;
  // The input a layer input id names (model_input_id(k) or kTargetInput).
  const torch::Tensor& tensor(int id) const;
};

using BatchGenerator = std::function<Batch(std::int64_t batch_size, std::uint64_t seed)>;

// Called around each layer's forward; the profiler uses it to attribute memory and time.
class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  virtual void before_layer(int /*layer*/) {}
  virtual void after_layer(int /*layer*/, const torch::Tensor& /*output*/) {}
};

// A module run whole, as its own code runs it (a Python nn.Module in eager PyTorch): its forward
// reports each layer (a submodule's call) to the observer as it happens and returns the loss. Its
// layers do not run one at a time, so what each keeps for backward is known beforehand
// (KnownSaves, from the module's own run) rather than found by running it alone.
using WholeForward = std::function<torch::Tensor(const Batch& batch, LayerObserver* observer)>;
struct KnownSaves {
  std::vector<std::vector<bool>> inputs;  // per layer, per input: kept for backward
  std::vector<bool> output;               // per layer: its output kept by its own backward
};

// Modules that are not headroom's own (a user's TorchScript module): they hold the parameters,
// move themselves and set their own training modes, which the model's layers cannot reach.
class ForeignModules {
 public:
  virtual ~ForeignModules() = default;
  virtual std::vector<torch::Tensor> parameters() const = 0;
  // Each parameter with its path in the module (layer4.0.conv1.weight).
  virtual std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const = 0;
  virtual std::vector<torch::Tensor> buffers() const = 0;
  virtual void to(torch::Device device) = 0;
  // Training with dropout on or off; BatchNorm with batch statistics or, in eval style, running ones.
  virtual void set_modes(bool training, bool dropout, bool batchnorm_eval) = 0;
};

class Model {
 public:
  Model(std::string name, Config config);

  // Registers a module so its parameters belong to the model and follow train()/eval().
  template <typename ModuleHolder>
  ModuleHolder register_module(const std::string& name, ModuleHolder module) {
    return root_->register_module(sanitize(name), std::move(module));
  }

  // Appends a layer; its inputs must be earlier layers or the batch. Returns its id.
  int add_layer(Layer layer);
  void set_batch_generator(BatchGenerator generator) { batch_generator_ = std::move(generator); }

  const std::string& name() const { return name_; }
  const Config& config() const { return config_; }
  const std::vector<Layer>& layers() const { return layers_; }
  int block_count() const;

  std::vector<torch::Tensor> parameters() const { return foreign_ ? foreign_->parameters() : root_->parameters(); }
  // Those that train (requires_grad): what gets gradients and optimizer state.
  std::vector<torch::Tensor> trainable_parameters() const;
  // Each parameter with its path: a module's own (layer4.0.conv1.weight); for the zoo's, its
  // layer's name and the parameter's name in it (stage0.block0.conv1.weight).
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const;
  // Stops training the parameters `patterns` name (core/freeze_patterns.h: requires_grad off, so
  // no gradient, no optimizer state, and no activations kept below the first trainable layer), and
  // remembers them for model_source. Throws InputError for a pattern that names no parameter, or
  // where nothing would train (also with no patterns, where the model froze everything itself).
  void freeze(const std::vector<std::string>& patterns);
  const std::vector<std::string>& freeze_patterns() const { return freeze_; }
  // BatchNorm's running statistics and counters.
  std::vector<torch::Tensor> buffers() const { return foreign_ ? foreign_->buffers() : root_->buffers(); }
  std::int64_t parameter_bytes() const;
  void set_training(bool training);
  void set_dropout(bool enabled);
  // The precision every layer's forward runs in (profiled, planned and executed alike). Under bf16
  // the floating parameters and buffers become bfloat16 (as PyTorch's model.to(torch.bfloat16)),
  // and back to float32 when leaving it; the extra resident bytes follow the buffers.
  void set_precision(core::Precision precision);
  // Moves parameters and buffers; batches are made on the CPU and moved by the caller.
  void to(torch::Device device);

  // The model's layers run modules it does not own (see ForeignModules), loaded from `file`.
  void set_foreign_modules(std::shared_ptr<ForeignModules> modules, core::ModelFile file);
  // The modules run whole (see WholeForward), captured as `capture` ("eager"): forward() runs
  // `forward`, and forward_to() and layers alone are refused. `saves` has one entry per layer.
  void set_whole_forward(std::shared_ptr<ForeignModules> modules, WholeForward forward, KnownSaves saves,
                         std::string capture);
  bool runs_whole() const { return static_cast<bool>(whole_forward_); }
  const KnownSaves* known_saves() const { return whole_forward_ ? &known_saves_ : nullptr; }
  const std::string& capture() const { return capture_; }
  // How a module from Python became the TorchScript file it was loaded from ("script", "trace").
  void set_capture(std::string capture) { capture_ = std::move(capture); }
  // Allocated for the model's life besides its parameters: buffers, what its batch generator keeps,
  // what a loader keeps. Measured as the model is built (models/build_allocations.h).
  std::int64_t extra_resident_bytes() const { return extra_resident_bytes_; }
  void set_extra_resident_bytes(std::int64_t bytes) { extra_resident_bytes_ = bytes; }
  const std::optional<core::ModelFile>& file() const { return file_; }
  RunContext context() const { return context_; }

  // A synthetic batch with a learnable target, deterministic in (batch_size, seed).
  Batch make_batch(std::int64_t batch_size, std::uint64_t seed) const;

  // Runs the layers in order and returns the last layer's output (the loss). Each layer's output is
  // released right after its last reader, as an eager framework would.
  torch::Tensor forward(const Batch& batch, LayerObserver* observer = nullptr) const;
  // The output of layer `last` (running layers 0..last), e.g. the logits before the loss.
  torch::Tensor forward_to(const Batch& batch, int last) const;

  // BatchNorm in eval style: normalize with the running statistics even while training, so each
  // sample's output does not depend on the rest of its (micro-)batch and micro-batching is exact.
  void set_batchnorm_eval(bool eval);

  // Runs `layer` as the given variant (Tempo's: its memory-lean one). Throws std::invalid_argument
  // for a variant the layer lacks.
  void set_variant(int layer, core::LayerVariant variant);
  // Every layer that has `variant` runs it, the others their standard one.
  void set_all_variants(core::LayerVariant variant);

  // For each layer, the id of the last layer that reads its output (its own id if none does).
  const std::vector<int>& last_readers() const { return last_readers_; }

 private:
  static std::string sanitize(const std::string& name);
  // Foreign modules keep their own modes: tell them the model's.
  void apply_foreign_modes();
  torch::Tensor forward_to(const Batch& batch, int last, LayerObserver* observer) const;

  std::string name_;
  Config config_;
  std::shared_ptr<torch::nn::Module> root_;
  std::vector<Layer> layers_;
  std::vector<int> last_readers_;
  BatchGenerator batch_generator_;
  RunContext context_;
  bool batchnorm_eval_ = false;
  std::shared_ptr<ForeignModules> foreign_;
  std::optional<core::ModelFile> file_;
  std::int64_t extra_resident_bytes_ = 0;
  std::vector<std::string> freeze_;
  WholeForward whole_forward_;
  KnownSaves known_saves_;
  std::string capture_;
};

// The batches' samples one after another, each input and the target concatenated along dimension 0.
Batch concatenate(const std::vector<Batch>& batches);

// The tensors a layer reads, gathered from the batch and earlier outputs.
std::vector<torch::Tensor> gather_inputs(const Layer& layer, const Batch& batch,
                                         const std::vector<torch::Tensor>& outputs);

}  // namespace headroom::models
