#include "models/torchscript_model.h"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/script.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/sha256.h"
#include "models/build_allocations.h"

namespace headroom::models {

namespace {

const char* const kDtypes = "float32, float64, int64, int32";

// libtorch's messages run over several lines (and a C++ backtrace): the first one says it.
std::string first_line(const std::string& text) {
  const auto end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

std::string error_text(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  const std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  // The TorchScript interpreter puts its traceback first and the op's own message last.
  const auto cause = text.rfind("\nRuntimeError: ");
  if (cause != std::string::npos) return first_line(text.substr(cause + 15));
  return first_line(text);
}

// A whole non-negative integer of at most `max`, or nothing.
std::optional<std::int64_t> parse_count(const std::string& text, std::int64_t max) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const long long value = std::stoll(text);
  if (value > max) return std::nullopt;
  return value;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> items;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == separator) {
      items.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return items;
}

std::string shape_text(c10::IntArrayRef sizes) {
  std::string out = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

torch::Dtype torch_dtype(const std::string& dtype) {
  if (dtype == "float32") return torch::kFloat32;
  if (dtype == "float64") return torch::kFloat64;
  if (dtype == "int64") return torch::kInt64;
  return torch::kInt32;
}

torch::Tensor random_batch(const TensorSpec& spec, std::int64_t batch, at::Generator& generator) {
  std::vector<std::int64_t> shape{batch};
  shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
  if (spec.is_integer()) {
    return torch::randint(spec.low, spec.high, shape, generator, torch::TensorOptions().dtype(torch_dtype(spec.dtype)));
  }
  return torch::randn(shape, generator, torch::TensorOptions().dtype(torch_dtype(spec.dtype)));
}

bool is_batchnorm(const torch::jit::Module& module) {
  const auto name = module.type()->name();
  return name && name->qualifiedName().find("BatchNorm") != std::string::npos;
}

std::string class_name(const torch::jit::Module& module) {
  const auto name = module.type()->name();
  return name ? name->name() : "module";
}

// The module's parameters and modes, for the Model that runs its children as layers.
class ScriptModules : public ForeignModules {
 public:
  explicit ScriptModules(torch::jit::Module module) : module_(std::move(module)) {}
  std::vector<torch::Tensor> parameters() const override {
    std::vector<torch::Tensor> out;
    for (const auto& p : module_.parameters()) out.push_back(p);
    return out;
  }
  std::vector<torch::Tensor> buffers() const override {
    std::vector<torch::Tensor> out;
    for (const auto& b : module_.buffers()) out.push_back(b);
    return out;
  }
  void to(torch::Device device) override { module_.to(device); }
  // Module by module (train() would recurse): BatchNorm follows batchnorm_eval, every other module
  // (dropout, attention's dropout) follows `dropout`, so "dropout off" leaves BatchNorm training.
  void set_modes(bool training, bool dropout, bool batchnorm_eval) override {
    for (auto m : module_.modules()) {
      if (!m.hasattr("training")) continue;  // scripted nn.Modules have it; modules built in C++ may not
      const bool on = training && (is_batchnorm(m) ? !batchnorm_eval : dropout);
      m.setattr("training", on);
    }
  }

 private:
  mutable torch::jit::Module module_;
};

// The children the module's forward calls on itself, in order (calls inside branches and loops are
// not a plain chain and are not listed).
std::vector<std::string> called_children(const torch::jit::Module& module) {
  std::vector<std::string> order;
  const auto graph = module.get_method("forward").graph();
  const torch::jit::Value* self = graph->inputs()[0];
  for (const torch::jit::Node* node : graph->nodes()) {
    if (node->kind() != c10::prim::CallMethod) continue;
    const torch::jit::Node* callee = node->inputs()[0]->node();
    if (callee->kind() == c10::prim::GetAttr && callee->inputs()[0] == self) order.push_back(callee->s(c10::attr::name));
  }
  return order;
}

// The layers: --layers as named, or the children forward calls. Either way each must be a child,
// called once, in that order.
std::vector<std::string> chain_of(const torch::jit::Module& module, const std::string& layers_text) {
  std::vector<std::string> children;
  for (const auto& child : module.named_children()) children.push_back(child.name);
  if (children.empty()) {
    throw core::InputError("the module has no children (submodules) to profile as layers: export an nn.Sequential of "
                           "its blocks");
  }
  const std::vector<std::string> called = called_children(module);
  std::vector<std::string> chain = layers_text.empty() ? called : split(layers_text, ',');
  std::string listed;
  for (const auto& c : children) listed += (listed.empty() ? "" : ", ") + c;
  for (std::size_t i = 0; i < chain.size(); ++i) {
    if (std::find(children.begin(), children.end(), chain[i]) == children.end()) {
      throw core::InputError("layers: '" + chain[i] + "' is not a child of the module (its children: " + listed + ")");
    }
    if (std::find(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(i), chain[i]) != chain.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw core::InputError("layers: '" + chain[i] + "' is " + (layers_text.empty() ? "called" : "named") +
                             " twice; each layer runs once per step");
    }
  }
  if (chain.empty()) {
    throw core::InputError("the module's forward calls none of its children directly (children: " + listed +
                           "): name them in order with --layers");
  }
  std::string calls;
  for (const auto& c : called) calls += (calls.empty() ? "" : ", ") + c;
  for (std::size_t i = 0; i < chain.size(); ++i) {
    if (i >= called.size() || called[i] != chain[i]) {
      throw core::InputError("layers: forward does not call '" + chain[i] + "' as layer " + std::to_string(i + 1) +
                             " (it calls " + (calls.empty() ? std::string("no child directly") : calls) + ")");
    }
  }
  if (chain.size() < called.size()) {
    throw core::InputError("layers: forward also calls '" + called[chain.size()] + "' after '" + chain.back() +
                           "'; name every child it calls (it calls " + calls + ")");
  }
  return chain;
}

// A chain gives each child one tensor, the previous child's output.
void expect_one_input(const torch::jit::Module& child, const std::string& name) {
  const auto& arguments = child.get_method("forward").function().getSchema().arguments();
  std::vector<std::string> required;
  for (std::size_t i = 1; i < arguments.size(); ++i) {
    if (!arguments[i].default_value()) required.push_back(arguments[i].name());
  }
  if (required.size() != 1) {
    std::string names;
    for (const auto& r : required) names += (names.empty() ? "" : ", ") + r;
    throw core::InputError("layer " + name + ": its forward reads " + std::to_string(required.size()) + " inputs (" +
                           names + "); in a chain each layer reads one tensor, the previous layer's output");
  }
}

torch::Tensor call_child(torch::jit::Module& child, const torch::Tensor& input) {
  const c10::IValue out = child.forward({input});
  if (!out.isTensor()) throw std::runtime_error("returns a " + out.tagKind() + ", not a tensor");
  return out.toTensor();
}

struct ModelFileBytes {
  std::string bytes;
  core::ModelFile file;
};

ModelFileBytes read_model_file(const std::string& path, const std::string& expected_sha256) {
  ModelFileBytes out;
  out.bytes = core::read_file(path, static_cast<std::uintmax_t>(kMaxModelFileBytes));
  out.file.sha256 = core::sha256_hex(out.bytes);
  std::error_code error;
  const auto absolute = std::filesystem::absolute(path, error);
  out.file.path = error ? path : absolute.lexically_normal().string();
  if (!expected_sha256.empty() && out.file.sha256 != expected_sha256) {
    throw core::InputError(path + " has changed since the trace was recorded (sha256 " + out.file.sha256.substr(0, 12) +
                           "…, recorded " + expected_sha256.substr(0, 12) + "…): profile it again");
  }
  return out;
}

const std::string& required_key(const std::map<std::string, std::string>& config, const std::string& key,
                                const std::string& why) {
  const auto it = config.find(key);
  if (it == config.end() || it->second.empty()) throw core::InputError(key + ": " + why);
  return it->second;
}

}  // namespace

std::int64_t TensorSpec::elements() const {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

std::string TensorSpec::text() const {
  std::string out = shape.empty() ? "scalar" : "";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i > 0 ? "x" : "") + std::to_string(shape[i]);
  out += ":" + dtype;
  if (is_integer()) out += ":" + std::to_string(low) + "-" + std::to_string(high);
  return out;
}

TensorSpec parse_tensor_spec(const std::string& text, const std::string& field) {
  const std::string form = " (expected SHAPE:DTYPE such as 3x224x224:float32, or 128:int64:0-8192 for integers in "
                           "[0, 8192); SHAPE is one sample's, without the batch dimension: scalar for one number)";
  const auto parts = split(text, ':');
  if (parts.size() < 2 || parts.size() > 3) throw core::InputError(field + ": '" + text + "' is not a tensor spec" + form);
  TensorSpec spec;
  if (!parts[0].empty() && parts[0] != "scalar") {
    for (const auto& dim : split(parts[0], 'x')) {
      const auto value = parse_count(dim, kMaxSetting);
      if (!value || *value == 0) {
        throw core::InputError(field + ": dimension '" + dim + "' of '" + text + "' is not a size from 1 to " +
                               std::to_string(kMaxSetting) + form);
      }
      spec.shape.push_back(*value);
      if (spec.shape.size() > kMaxSpecDims) {
        throw core::InputError(field + ": '" + text + "' has more than " + std::to_string(kMaxSpecDims) + " dimensions");
      }
      if (spec.elements() > kMaxSampleElements) {
        throw core::InputError(field + ": '" + text + "' is more than " + std::to_string(kMaxSampleElements) +
                               " elements per sample");
      }
    }
  }
  spec.dtype = parts[1];
  if (spec.dtype != "float32" && spec.dtype != "float64" && spec.dtype != "int64" && spec.dtype != "int32") {
    throw core::InputError(field + ": dtype '" + spec.dtype + "' is not supported (supported: " + kDtypes + ")");
  }
  if (spec.is_integer()) {
    if (parts.size() != 3) {
      throw core::InputError(field + ": integers need their range, e.g. " + (parts[0].empty() ? "" : parts[0]) + ":" +
                             spec.dtype + ":0-1000 for values in [0, 1000)");
    }
    const auto range = split(parts[2], '-');
    const std::int64_t max = spec.dtype == "int32" ? std::int64_t{1} << 31 : std::int64_t{1} << 62;
    const auto low = range.size() == 2 ? parse_count(range[0], max) : std::nullopt;
    const auto high = range.size() == 2 ? parse_count(range[1], max) : std::nullopt;
    if (!low || !high || *low >= *high) {
      throw core::InputError(field + ": range '" + parts[2] + "' is not LOW-HIGH with 0 <= LOW < HIGH <= " +
                             std::to_string(max) + " (values are drawn from [LOW, HIGH))");
    }
    spec.low = *low;
    spec.high = *high;
  } else if (parts.size() == 3) {
    throw core::InputError(field + ": a range applies to integer dtypes only; " + spec.dtype + " values are drawn "
                           "from a standard normal");
  }
  return spec;
}

namespace {

Model load_module(const std::string& path, const std::map<std::string, std::string>& config, std::uint64_t seed,
                  const std::string& expected_sha256) {
  for (const auto& [key, value] : config) {
    if (std::find(std::begin(kTorchScriptKeys), std::end(kTorchScriptKeys), key) == std::end(kTorchScriptKeys)) {
      throw core::InputError("config: '" + key + "' is not a TorchScript model setting (input, target, loss, layers)");
    }
  }
  const TensorSpec input = parse_tensor_spec(
      required_key(config, "input", "give the input's shape and dtype, e.g. --input 3x224x224:float32"), "input");
  const auto loss_it = config.find("loss");
  const std::string loss = loss_it == config.end() ? "cross-entropy" : loss_it->second;
  if (loss != "cross-entropy" && loss != "mse" && loss != "model") {
    throw core::InputError("loss: expected cross-entropy, mse or model, got '" + loss + "'");
  }
  const auto target_it = config.find("target");
  if (loss == "model" && target_it != config.end() && !target_it->second.empty()) {
    throw core::InputError("target: with --loss model the module computes the loss from its input; it reads no target");
  }
  // Flags first, the file after: a typo costs no load.
  if (target_it != config.end() && !target_it->second.empty()) parse_tensor_spec(target_it->second, "target");

  // The graph executor's optimizations change a module after its first runs (profiling runs, then
  // differentiable subgraphs that save other tensors for backward): off, every run allocates and
  // takes what the profiled ones did, op by op, as eager PyTorch would. Process-wide, and headroom
  // runs one model per process.
  torch::jit::setGraphExecutorOptimize(false);
  ModelFileBytes file = read_model_file(path, expected_sha256);
  torch::jit::Module module;
  try {
    std::istringstream stream(file.bytes);
    module = torch::jit::load(stream);
  } catch (const std::exception& e) {
    throw core::InputError(path + " is not a TorchScript module (save one with torch.jit.save(torch.jit.script(model), "
                           "path)): " + error_text(e));
  }
  file.bytes.clear();
  file.bytes.shrink_to_fit();

  const auto layers_it = config.find("layers");
  const std::vector<std::string> chain = chain_of(module, layers_it == config.end() ? "" : layers_it->second);
  std::vector<torch::jit::Module> children;
  for (const auto& name : chain) {
    children.push_back(module.attr(name).toModule());
    expect_one_input(children.back(), name);
  }

  // A probe batch of two, deterministic and without autograd: the chain must compute what the
  // module's own forward computes, and the output tells the target's shape.
  const auto make_input = [input](std::int64_t batch, std::uint64_t s) {
    auto generator = at::detail::createCPUGenerator(s);
    return random_batch(input, batch, generator);
  };
  torch::Tensor probe_output;
  {
    torch::NoGradGuard no_grad;
    module.eval();
    const torch::Tensor probe = make_input(2, seed);
    torch::Tensor expected;
    try {
      expected = module.forward({probe}).toTensor();
    } catch (const std::exception& e) {
      throw core::InputError("the module's forward fails on a batch of 2 inputs of " + input.text() + " (shape " +
                             shape_text(probe.sizes()) + "): " + error_text(e));
    }
    torch::Tensor x = probe;
    for (std::size_t i = 0; i < children.size(); ++i) {
      try {
        x = call_child(children[i], x);
      } catch (const std::exception& e) {
        throw core::InputError("layer " + chain[i] + " fails on the previous layer's output (shape " + shape_text(x.sizes()) +
                               "): " + error_text(e));
      }
    }
    if (!x.sizes().equals(expected.sizes()) || !torch::allclose(x, expected, 1e-4, 1e-5)) {
      throw core::InputError("the chain " + std::to_string(chain.size()) + " layers long (" + chain.front() + " … " +
                             chain.back() + ") does not compute what the module's forward does: forward does more "
                             "than pass each child's output to the next; export an nn.Sequential of its blocks");
    }
    probe_output = x;
  }

  std::optional<TensorSpec> target;
  if (loss == "model") {
    if (probe_output.numel() != 1) {
      throw core::InputError("loss: with --loss model the module must return the loss (one number); it returns shape " +
                             shape_text(probe_output.sizes()));
    }
  } else if (target_it != config.end() && !target_it->second.empty()) {
    target = parse_tensor_spec(target_it->second, "target");
  } else if (loss == "cross-entropy") {
    if (probe_output.dim() < 2) {
      throw core::InputError("loss: cross-entropy needs class scores along the output's last dimension; one sample's "
                             "output is a single number (use --loss mse or model)");
    }
    TensorSpec t{{}, "int64", 0, probe_output.size(-1)};
    for (std::int64_t d = 1; d + 1 < probe_output.dim(); ++d) t.shape.push_back(probe_output.size(d));
    target = t;
  } else {
    TensorSpec t{{}, "float32"};
    for (std::int64_t d = 1; d < probe_output.dim(); ++d) t.shape.push_back(probe_output.size(d));
    target = t;
  }

  std::map<std::string, std::string> resolved = {{"input", input.text()}, {"loss", loss}};
  std::string layer_list;
  for (const auto& name : chain) layer_list += (layer_list.empty() ? "" : ",") + name;
  resolved["layers"] = layer_list;
  if (target) resolved["target"] = target->text();

  const std::string stem = std::filesystem::path(path).stem().string();
  Model model(stem.empty() ? "torchscript" : stem, Config("torchscript", resolved));
  for (std::size_t i = 0; i < children.size(); ++i) {
    Layer layer;
    layer.name = chain[i];
    bool batchnorm = false;
    for (const auto& m : children[i].modules()) batchnorm |= is_batchnorm(m);
    // "batchnorm" in the kind is what the planner's and executor's BatchNorm notes look for.
    layer.kind = class_name(children[i]) + (batchnorm ? " (batchnorm)" : "");
    layer.inputs = {i == 0 ? kModelInput : static_cast<int>(i) - 1};
    layer.block = static_cast<int>(i);
    for (const auto& p : children[i].parameters()) layer.parameters.push_back(p);
    layer.forward = [child = children[i], batchnorm](const std::vector<torch::Tensor>& in, const RunContext& context) mutable {
      if (!(batchnorm && context.recomputing)) return call_child(child, in[0]);
      // A checkpointed block's second run: its batch is already in BatchNorm's running statistics.
      // The run updates copies instead (the zoo's BatchNorm skips the update); writing the old
      // values back in place would change tensors the backward saved.
      struct Swapped {
        torch::jit::Module module;
        std::string name;
        torch::Tensor original;
      };
      std::vector<Swapped> swapped;
      for (auto m : child.modules()) {
        for (const auto& b : m.named_buffers(/*recurse=*/false)) {
          swapped.push_back({m, b.name, b.value});
          m.setattr(b.name, b.value.clone());
        }
      }
      struct Restore {
        std::vector<Swapped>& swapped;
        ~Restore() {
          for (auto& s : swapped) s.module.setattr(s.name, s.original);
        }
      } restore{swapped};
      return call_child(child, in[0]);
    };
    model.add_layer(std::move(layer));
  }
  if (loss != "model") {
    const int last = static_cast<int>(children.size()) - 1;
    const bool cross_entropy = loss == "cross-entropy";
    Layer layer;
    layer.name = "loss";
    layer.kind = "loss";
    layer.inputs = {last, kTargetInput};
    layer.forward = [cross_entropy](const std::vector<torch::Tensor>& in, const RunContext&) {
      const auto& x = in[0];
      if (cross_entropy) return torch::cross_entropy_loss(x.reshape({-1, x.size(-1)}), in[1].reshape({-1}));
      return torch::mse_loss(x, in[1]);
    };
    model.add_layer(std::move(layer));
  }
  model.set_batch_generator([make_input, target](std::int64_t batch, std::uint64_t s) {
    Batch b;
    b.input = make_input(batch, s);
    if (target) {
      // Its own stream, so the input does not depend on whether there is a target.
      auto generator = at::detail::createCPUGenerator(s ^ 0x7a26e7ull);
      b.target = random_batch(*target, batch, generator);
    } else {
      b.target = torch::empty({batch, 0});  // the module's loss reads none; concatenation still works
    }
    return b;
  });

  // The loss on a probe batch: a target that does not fit the output is refused here, not mid-profile.
  {
    torch::NoGradGuard no_grad;
    try {
      const torch::Tensor value = model.forward(model.make_batch(2, seed));
      if (value.numel() != 1) throw std::runtime_error("the loss is not one number");
    } catch (const std::exception& e) {
      throw core::InputError("the loss (" + loss + ") fails on the module's output " + shape_text(probe_output.sizes()) +
                             (target ? " and a target of " + target->text() : std::string()) + ": " + error_text(e));
    }
  }
  model.set_foreign_modules(std::make_shared<ScriptModules>(module), file.file);
  model.set_training(true);
  return model;
}

}  // namespace

Model load_torchscript_model(const std::string& path, const std::map<std::string, std::string>& config,
                             std::uint64_t seed, const std::string& expected_sha256) {
  // Loading keeps each function's debug records (source ranges for error messages) for the module's
  // life: memory the budget counts, measured here with the rest.
  return counting_build_allocations([&] { return load_module(path, config, seed, expected_sha256); });
}

}  // namespace headroom::models
