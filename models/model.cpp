#include "models/model.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.h"
#include "core/freeze_patterns.h"

namespace headroom::models {

namespace {

// libtorch 2.4 made the autocast state per device type (is_autocast_enabled(device) and friends)
// and deprecated the CUDA- and CPU-named calls 1.13 has.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool autocast_enabled(c10::DeviceType device) { return at::autocast::is_autocast_enabled(device); }
at::ScalarType autocast_dtype(c10::DeviceType device) { return at::autocast::get_autocast_dtype(device); }
void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
}
#else
bool autocast_enabled(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
at::ScalarType autocast_dtype(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
}
void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
}
#endif

// Autocast on for one layer's forward, as torch.autocast(device, dtype) is for a Python model's:
// the state before it is put back after, and leaving the outermost region frees the cast cache (the
// lower-precision copies of the weights it used; those an op saved for backward live on with it).
class AutocastRegion {
 public:
  AutocastRegion(core::Precision precision, c10::DeviceType device) : device_(device) {
    if (!core::is_autocast(precision)) return;
    active_ = true;
    was_enabled_ = autocast_enabled(device_);
    was_dtype_ = autocast_dtype(device_);
    set_autocast(device_, true, precision == core::Precision::Bf16Autocast ? at::kBFloat16 : at::kHalf);
    at::autocast::increment_nesting();
  }
  ~AutocastRegion() {
    if (!active_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_autocast(device_, was_enabled_, was_dtype_);
  }
  AutocastRegion(const AutocastRegion&) = delete;
  AutocastRegion& operator=(const AutocastRegion&) = delete;

 private:
  c10::DeviceType device_;
  bool active_ = false;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

}  // namespace

torch::Tensor Layer::run(const std::vector<torch::Tensor>& inputs, const RunContext& context) const {
  const c10::DeviceType device = inputs.empty() ? c10::DeviceType::CPU : inputs.front().device().type();
  const AutocastRegion region(context.precision, device);
  if (context.precision == core::Precision::Bf16) {
    // The parameters are bfloat16 and the batch arrives in float32, as a loader gives it: a layer
    // reads its floating inputs in bfloat16, and the loss reads the logits in float32, as a bf16
    // training loop casts them (`loss_fn(logits.float(), y)`), so the loss and its gradient's
    // start are not rounded to 8 bits of mantissa. A contrastive loss reads its embeddings in
    // float32 likewise (models/contrastive_loss.h).
    const at::ScalarType wanted = kind == "loss" || kind == "contrastive_loss" ? at::kFloat : at::kBFloat16;
    std::vector<torch::Tensor> cast = inputs;
    for (auto& t : cast) {
      if (t.defined() && t.is_floating_point() && t.scalar_type() != wanted) t = t.to(wanted);
    }
    return tempo ? tempo_forward(cast, context) : forward(cast, context);
  }
  return tempo ? tempo_forward(inputs, context) : forward(inputs, context);
}

std::int64_t Batch::bytes() const {
  std::int64_t total = 0;
  const auto add = [&total](const torch::Tensor& t) {
    if (t.defined()) total += static_cast<std::int64_t>(t.numel() * t.element_size());
  };
  add(input);
  add(target);
  for (const auto& t : further_inputs) add(t);
  return total;
}

Batch Batch::to(torch::Device device) const {
  Batch out{input.to(device), target.to(device), {}};
  for (const auto& t : further_inputs) out.further_inputs.push_back(t.to(device));
  return out;
}

const torch::Tensor& Batch::tensor(int id) const {
  if (id == kModelInput) return input;
  if (id == kTargetInput) return target;
  const int k = core::model_input_index(id);
  if (!is_model_input(id) || k > static_cast<int>(further_inputs.size())) {
    throw std::out_of_range("the batch has no input " + std::to_string(id) + " (it has " +
                            std::to_string(1 + further_inputs.size()) + ")");
  }
  return further_inputs[static_cast<std::size_t>(k - 1)];
}

Batch concatenate(const std::vector<Batch>& batches) {
  std::vector<torch::Tensor> inputs, targets;
  for (const auto& b : batches) {
    inputs.push_back(b.input);
    targets.push_back(b.target);
  }
  Batch out{torch::cat(inputs), torch::cat(targets), {}};
  const std::size_t further = batches.empty() ? 0 : batches.front().further_inputs.size();
  for (std::size_t k = 0; k < further; ++k) {
    std::vector<torch::Tensor> parts;
    for (const auto& b : batches) parts.push_back(b.further_inputs.at(k));
    out.further_inputs.push_back(torch::cat(parts));
  }
  return out;
}

Model::Model(std::string name, Config config)
    : name_(std::move(name)), config_(std::move(config)), root_(std::make_shared<torch::nn::Module>("Model")) {}

std::string Model::sanitize(const std::string& name) {
  // torch::nn::Module forbids dots in child names; layer names use them for hierarchy.
  std::string out = name;
  std::replace(out.begin(), out.end(), '.', '_');
  return out;
}

int Model::add_layer(Layer layer) {
  const int id = static_cast<int>(layers_.size());
  for (const int input : layer.inputs) {
    if (!is_model_input(input) && input != kTargetInput && (input < 0 || input >= id)) {
      throw std::invalid_argument("layer " + layer.name + " reads layer " + std::to_string(input) +
                                  ", which is not an earlier layer");
    }
  }
  if (!layer.forward) throw std::invalid_argument("layer " + layer.name + " has no forward function");
  last_readers_.push_back(id);
  for (const int input : layer.inputs) {
    if (input >= 0) last_readers_[static_cast<std::size_t>(input)] = id;
  }
  layers_.push_back(std::move(layer));
  return id;
}

void Model::set_variant(int layer, core::LayerVariant variant) {
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) {
    throw std::invalid_argument("set_variant: no layer " + std::to_string(layer));
  }
  Layer& l = layers_[static_cast<std::size_t>(layer)];
  const bool tempo = variant == core::LayerVariant::Tempo;
  if (tempo && !l.has_tempo_variant()) {
    throw std::invalid_argument("layer " + l.name + " (" + l.kind + ") has no memory-lean variant");
  }
  l.tempo = tempo;
}

void Model::set_all_variants(core::LayerVariant variant) {
  const bool tempo = variant == core::LayerVariant::Tempo;
  for (auto& layer : layers_) layer.tempo = tempo && layer.has_tempo_variant();
}

int Model::block_count() const {
  int blocks = 0;
  for (const auto& layer : layers_) blocks = std::max(blocks, layer.block + 1);
  return blocks;
}

std::vector<torch::Tensor> Model::trainable_parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> Model::named_parameters() const {
  if (foreign_) return foreign_->named_parameters();
  // The root registers each layer's module under its sanitized name: what follows that name's
  // first dot is the parameter's name inside the module.
  std::unordered_map<const void*, std::string> inner;
  for (const auto& item : root_->named_parameters()) {
    const std::string& key = item.key();
    const std::size_t dot = key.find('.');
    inner.emplace(item.value().unsafeGetTensorImpl(), dot == std::string::npos ? key : key.substr(dot + 1));
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::unordered_set<const void*> seen;
  for (const auto& layer : layers_) {
    for (std::size_t k = 0; k < layer.parameters.size(); ++k) {
      const torch::Tensor& p = layer.parameters[k];
      if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
      const auto it = inner.find(p.unsafeGetTensorImpl());
      out.emplace_back(layer.name + "." + (it != inner.end() ? it->second : std::to_string(k)), p);
    }
  }
  return out;
}

void Model::freeze(const std::vector<std::string>& patterns) {
  const auto named = named_parameters();
  std::vector<std::string> paths;
  std::vector<bool> already_frozen;
  for (const auto& [path, p] : named) {
    paths.push_back(path);
    already_frozen.push_back(!p.requires_grad());
  }
  core::check_freeze_patterns(patterns, paths, already_frozen, name_);
  for (const auto& [path, p] : named) {
    if (core::frozen_by(patterns, path)) const_cast<torch::Tensor&>(p).set_requires_grad(false);
  }
  freeze_ = patterns;
}

std::int64_t Model::parameter_bytes() const {
  std::int64_t total = 0;
  for (const auto& p : parameters()) total += static_cast<std::int64_t>(p.numel() * p.element_size());
  return total;
}

void Model::set_training(bool training) {
  context_.training = training;
  root_->train(training);
  apply_foreign_modes();
}

void Model::apply_foreign_modes() {
  if (foreign_) foreign_->set_modes(context_.training, context_.dropout, batchnorm_eval_);
}

void Model::set_dropout(bool enabled) {
  context_.dropout = enabled;
  apply_foreign_modes();
}

void Model::set_precision(core::Precision precision) {
  const bool was_bf16 = context_.precision == core::Precision::Bf16;
  const bool is_bf16 = precision == core::Precision::Bf16;
  if (was_bf16 != is_bf16) {
    const at::ScalarType dtype = is_bf16 ? at::kBFloat16 : at::kFloat;
    // Tensor by tensor, floating ones only: Module::to(dtype) would also turn BatchNorm's integer
    // batch counter into bfloat16. set_data keeps each tensor's identity, so the layers' and the
    // foreign modules' handles see the new dtype.
    torch::NoGradGuard no_grad;
    std::int64_t buffer_change = 0;
    for (auto p : parameters()) {
      if (p.is_floating_point()) p.set_data(p.to(dtype));
    }
    for (auto b : buffers()) {
      if (!b.is_floating_point()) continue;
      const std::int64_t before = static_cast<std::int64_t>(b.numel() * b.element_size());
      b.set_data(b.to(dtype));
      buffer_change += static_cast<std::int64_t>(b.numel() * b.element_size()) - before;
    }
    extra_resident_bytes_ += buffer_change;
  }
  context_.precision = precision;
}

void Model::to(torch::Device device) {
  root_->to(device);
  if (foreign_) foreign_->to(device);
}

void Model::set_whole_forward(std::shared_ptr<ForeignModules> modules, WholeForward forward, KnownSaves saves,
                              std::string capture) {
  if (saves.inputs.size() != layers_.size() || saves.output.size() != layers_.size()) {
    throw std::logic_error("set_whole_forward: saves for " + std::to_string(saves.inputs.size()) + " layers, the model has " +
                           std::to_string(layers_.size()));
  }
  foreign_ = std::move(modules);
  whole_forward_ = std::move(forward);
  known_saves_ = std::move(saves);
  capture_ = std::move(capture);
  apply_foreign_modes();
}

void Model::set_foreign_modules(std::shared_ptr<ForeignModules> modules, core::ModelFile file) {
  foreign_ = std::move(modules);
  file_ = std::move(file);
  apply_foreign_modes();
}

Batch Model::make_batch(std::int64_t batch_size, std::uint64_t seed) const {
  if (!batch_generator_) throw std::logic_error("model " + name_ + " has no batch generator");
  if (batch_size <= 0) throw core::InputError("batch size must be positive, got " + std::to_string(batch_size));
  return batch_generator_(batch_size, seed);
}

std::vector<torch::Tensor> gather_inputs(const Layer& layer, const Batch& batch,
                                         const std::vector<torch::Tensor>& outputs) {
  std::vector<torch::Tensor> inputs;
  inputs.reserve(layer.inputs.size());
  for (const int input : layer.inputs) {
    if (input < 0) inputs.push_back(batch.tensor(input));
    else inputs.push_back(outputs[static_cast<std::size_t>(input)]);
  }
  return inputs;
}

void Model::set_batchnorm_eval(bool eval) {
  batchnorm_eval_ = eval;
  for (const auto& child : root_->children()) {
    if (dynamic_cast<torch::nn::BatchNorm2dImpl*>(child.get()) != nullptr) child->train(!eval && context_.training);
  }
  apply_foreign_modes();
}

torch::Tensor Model::forward(const Batch& batch, LayerObserver* observer) const {
  if (whole_forward_) return whole_forward_(batch, observer);
  return forward_to(batch, static_cast<int>(layers_.size()) - 1, observer);
}

torch::Tensor Model::forward_to(const Batch& batch, int last) const { return forward_to(batch, last, nullptr); }

torch::Tensor Model::forward_to(const Batch& batch, int last, LayerObserver* observer) const {
  if (layers_.empty()) throw std::logic_error("model " + name_ + " has no layers");
  if (whole_forward_) throw std::logic_error("model " + name_ + " runs whole (" + capture_ + "): its layers do not run alone");
  if (last < 0 || last >= static_cast<int>(layers_.size())) throw std::out_of_range("forward_to: no layer " + std::to_string(last));
  std::vector<torch::Tensor> outputs(layers_.size());
  for (std::size_t i = 0; i <= static_cast<std::size_t>(last); ++i) {
    const Layer& layer = layers_[i];
    torch::Tensor out;
    {
      // The gathered inputs must be gone before the next layer runs, or they would keep outputs alive.
      std::vector<torch::Tensor> inputs = gather_inputs(layer, batch, outputs);
      if (observer != nullptr) observer->before_layer(static_cast<int>(i));
      out = layer.run(inputs, context_);
    }
    if (observer != nullptr) observer->after_layer(static_cast<int>(i), out);
    outputs[i] = std::move(out);
    for (const int input : layer.inputs) {
      if (input >= 0 && last_readers_[static_cast<std::size_t>(input)] == static_cast<int>(i)) {
        outputs[static_cast<std::size_t>(input)] = torch::Tensor();
      }
    }
  }
  return std::move(outputs[static_cast<std::size_t>(last)]);
}

}  // namespace headroom::models
