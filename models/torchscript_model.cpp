#include "models/torchscript_model.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/script.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <unordered_set>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/sha256.h"
#include "models/build_allocations.h"
#include "models/script_graph.h"

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

// The module's parameters and modes, for the Model whose layers run pieces of its forward.
class ScriptModules : public ForeignModules {
 public:
  explicit ScriptModules(torch::jit::Module module) : module_(std::move(module)) {}
  std::vector<torch::Tensor> parameters() const override {
    std::vector<torch::Tensor> out;
    for (const auto& p : module_.parameters()) out.push_back(p);
    return out;
  }
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const override {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& p : module_.named_parameters()) out.emplace_back(p.name, p.value);
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

// `activation_dtype`: what the segment's folded dtype reads give (ScriptSegment::reads_activation_dtype).
torch::Tensor run_segment(torch::jit::GraphFunction& function, const c10::IValue& module,
                          const std::vector<torch::Tensor>& inputs, std::optional<c10::ScalarType> activation_dtype = {}) {
  torch::jit::Stack stack;
  stack.reserve(inputs.size() + 2);
  stack.emplace_back(module);
  for (const auto& t : inputs) stack.emplace_back(t);
  if (activation_dtype) stack.emplace_back(static_cast<std::int64_t>(*activation_dtype));
  function.run(stack);
  return stack.back().toTensor();
}

// The parameters a layer uses: those of the modules it calls, and those its functional code reads
// as attributes (a class token, a layer scale).
std::vector<torch::Tensor> parameters_read(const torch::jit::Module& module, const ScriptSegment& segment,
                                           const std::vector<torch::jit::Module>& called) {
  std::vector<torch::Tensor> out;
  for (const auto& c : called) {
    for (const auto& p : c.parameters()) out.push_back(p);
  }
  std::unordered_set<const void*> parameters;
  for (const auto& p : module.parameters()) parameters.insert(p.unsafeGetTensorImpl());
  const torch::jit::Value* self = segment.graph->inputs()[0];
  std::function<std::optional<torch::jit::Module>(const torch::jit::Value*)> object_of =
      [&](const torch::jit::Value* v) -> std::optional<torch::jit::Module> {
    if (v == self) return module;
    if (v->node()->kind() != c10::prim::GetAttr) return std::nullopt;
    const auto parent = object_of(v->node()->input(0));
    if (!parent) return std::nullopt;
    const c10::IValue a = parent->attr(v->node()->s(c10::attr::name));
    return a.isModule() ? std::optional<torch::jit::Module>(a.toModule()) : std::nullopt;
  };
  std::function<void(const torch::jit::Block*)> visit = [&](const torch::jit::Block* block) {
    for (const torch::jit::Node* node : block->nodes()) {
      for (const auto* inner : node->blocks()) visit(inner);
      if (node->kind() != c10::prim::GetAttr || node->output()->type()->kind() != c10::TypeKind::TensorType) continue;
      const auto owner = object_of(node->input(0));
      if (!owner) continue;
      const c10::IValue a = owner->attr(node->s(c10::attr::name));
      if (a.isTensor() && parameters.count(a.toTensor().unsafeGetTensorImpl()) > 0) out.push_back(a.toTensor());
    }
  };
  visit(segment.graph->block());
  return out;
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

// What the config asks of the module, checked before the file is read.
struct ModuleSettings {
  std::vector<TensorSpec> inputs;
  std::string loss;
  // Cross-entropy's classes: along dimension 1 ("1", PyTorch's cross_entropy for [N, C, d1, ...])
  // or the last ("last", a language model's [N, T, V]). Configs from before the key was recorded
  // meant the last.
  std::string class_dim;
  std::string target;  // the target's spec as given; empty: found from the module's output and the loss
};

ModuleSettings read_module_settings(const std::map<std::string, std::string>& config) {
  for (const auto& [key, value] : config) {
    if (std::find(std::begin(kTorchScriptKeys), std::end(kTorchScriptKeys), key) == std::end(kTorchScriptKeys)) {
      throw core::InputError("config: '" + key + "' is not a TorchScript model setting (input, target, loss, class_dim, layers, depth, "
                             "output_index)");
    }
  }
  ModuleSettings settings;
  // One spec per input forward takes, comma-separated in the config (--input repeated).
  for (const auto& text : split(required_key(config, "input", "give the input's shape and dtype, e.g. --input 3x224x224:float32"), ',')) {
    settings.inputs.push_back(parse_tensor_spec(text, "input"));
  }
  if (settings.inputs.size() > static_cast<std::size_t>(core::kMaxModelInputs)) {
    throw core::InputError("input: " + std::to_string(settings.inputs.size()) + " inputs given; a module takes at most " +
                           std::to_string(core::kMaxModelInputs));
  }
  const auto loss_it = config.find("loss");
  settings.loss = loss_it == config.end() ? "cross-entropy" : loss_it->second;
  if (settings.loss != "cross-entropy" && settings.loss != "mse" && settings.loss != "model") {
    throw core::InputError("loss: expected cross-entropy, mse or model, got '" + settings.loss + "'");
  }
  const auto class_dim = config.find("class_dim");
  if (class_dim != config.end() && settings.loss != "cross-entropy") {
    throw core::InputError("class_dim: only cross-entropy has classes, and the loss is " + settings.loss);
  }
  if (settings.loss == "cross-entropy") settings.class_dim = class_dim == config.end() ? "last" : class_dim->second;
  if (!settings.class_dim.empty() && settings.class_dim != "1" && settings.class_dim != "last") {
    throw core::InputError("class_dim: expected 1 (PyTorch's, [N, C, d1, ...]) or last ([N, T, V]), got '" +
                           settings.class_dim + "'");
  }
  if (const auto it = config.find("target"); it != config.end()) settings.target = it->second;
  if (settings.loss == "model" && !settings.target.empty()) {
    throw core::InputError("target: with --loss model the module computes the loss from its input; it reads no target");
  }
  // Flags first, the file after: a typo costs no load.
  if (!settings.target.empty()) parse_tensor_spec(settings.target, "target");
  return settings;
}

struct LoadedModule {
  torch::jit::Module module;
  core::ModelFile file;
};

LoadedModule load_script_file(const std::string& path, const std::string& expected_sha256) {
  // The graph executor's optimizations change a module after its first runs (profiling runs, then
  // differentiable subgraphs that save other tensors for backward): off, every run allocates and
  // takes what the profiled ones did, op by op, as eager PyTorch would. Process-wide, and headroom
  // runs one model per process.
  torch::jit::setGraphExecutorOptimize(false);
  ModelFileBytes file = read_model_file(path, expected_sha256);
  LoadedModule loaded;
  try {
    std::istringstream stream(file.bytes);
    loaded.module = torch::jit::load(stream);
  } catch (const std::exception& e) {
    throw core::InputError(path + " is not a TorchScript module (save one with torch.jit.save(torch.jit.script(model), "
                           "path)): " + error_text(e));
  }
  loaded.file = file.file;
  return loaded;
}

LayerSelection layer_selection(const std::map<std::string, std::string>& config) {
  LayerSelection selection;
  if (const auto it = config.find("layers"); it != config.end() && !it->second.empty()) selection.paths = split(it->second, ',');
  if (const auto it = config.find("output_index"); it != config.end() && !it->second.empty()) {
    const auto index = parse_count(it->second, 1 << 20);
    if (!index) throw core::InputError("output-index: '" + it->second + "' is not an element's index (0, 1, ...)");
    selection.output_index = static_cast<int>(*index);
  }
  if (const auto it = config.find("depth"); it != config.end() && !it->second.empty()) {
    if (!selection.paths.empty()) throw core::InputError("depth: give --depth or --layers, not both");
    const auto depth = parse_count(it->second, kMaxDepth);
    if (!depth || *depth == 0) {
      throw core::InputError("depth: '" + it->second + "' is not a depth from 1 to " + std::to_string(kMaxDepth) +
                             " (1: the module's children)");
    }
    selection.depth = static_cast<int>(*depth);
  }
  return selection;
}

void check_forward_takes(const torch::jit::Module& module, const std::string& path, std::size_t inputs) {
  const auto forward = module.find_method("forward");
  if (!forward) throw core::InputError(path + ": the module has no forward method");
  const auto& arguments = forward->function().getSchema().arguments();
  std::string names;
  for (std::size_t i = 1; i < arguments.size(); ++i) names += (i > 1 ? ", " : "") + arguments[i].name();
  if (arguments.size() - 1 != inputs) {
    throw core::InputError("input: the module's forward takes " + std::to_string(arguments.size() - 1) + " input" +
                           (arguments.size() == 2 ? "" : "s") + " (" + names + "); give --input for each, in that order (" +
                           std::to_string(inputs) + " given)");
  }
}

// The module's forward cut into layers, each layer's graph made runnable, and which layers the runs
// so far saw writing into their inputs in place.
struct ScriptLayers {
  ScriptGraph cut;
  std::vector<std::shared_ptr<torch::jit::GraphFunction>> functions;
  c10::IValue object;  // the module: every layer's graph reads it first
  // written[i]: the producers (earlier layers, or the batch's inputs) whose outputs layer i wrote into.
  std::vector<std::vector<int>> written;

  ScriptLayers(const torch::jit::Module& module, ScriptGraph graph)
      : cut(std::move(graph)), object(module._ivalue()), written(cut.segments.size()) {
    make_functions();
  }

  // Again after the graphs changed (fold_dtypes).
  void make_functions() {
    functions.clear();
    for (std::size_t i = 0; i < cut.segments.size(); ++i) {
      functions.push_back(std::make_shared<torch::jit::GraphFunction>(
          c10::QualifiedName("headroom.layer" + std::to_string(i)), cut.segments[i].graph, nullptr));
    }
  }

  // Runs the layers on a batch as the model will, returning every layer's output and noting whose
  // outputs each layer wrote into in place: the version counter of the input or of an earlier output
  // moved (a view shares its base's, so a write through an alias shows too).
  std::vector<torch::Tensor> run(const std::vector<torch::Tensor>& xs) {
    std::vector<torch::Tensor> outputs;
    for (std::size_t i = 0; i < cut.segments.size(); ++i) {
      std::vector<torch::Tensor> in;
      for (const int producer : cut.segments[i].inputs) {
        in.push_back(producer < 0 ? xs[static_cast<std::size_t>(core::model_input_index(producer))]
                                  : outputs[static_cast<std::size_t>(producer)]);
      }
      std::vector<std::int64_t> versions;
      for (const auto& t : xs) versions.push_back(t._version());
      for (const auto& t : outputs) versions.push_back(t._version());
      try {
        // The probe runs in float32.
        outputs.push_back(run_segment(*functions[i], object, in,
                                      cut.segments[i].reads_activation_dtype ? std::optional(c10::ScalarType::Float)
                                                                             : std::nullopt));
      } catch (const std::exception& e) {
        throw core::InputError("layer " + cut.segments[i].name + " fails on a batch of " + std::to_string(xs[0].size(0)) +
                               ": " + error_text(e));
      }
      note_writes(i, xs, outputs, versions);
    }
    return outputs;
  }

 private:
  // `versions`: the inputs' and then the earlier outputs' version counters before layer i ran.
  void note_writes(std::size_t i, const std::vector<torch::Tensor>& xs, const std::vector<torch::Tensor>& outputs,
                   const std::vector<std::int64_t>& versions) {
    auto& mine = written[i];
    const auto note = [&mine](int producer) {
      if (std::find(mine.begin(), mine.end(), producer) == mine.end()) mine.push_back(producer);
    };
    for (std::size_t k = 0; k < xs.size(); ++k) {
      if (xs[k]._version() != versions[k]) note(model_input_id(static_cast<int>(k)));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (outputs[j]._version() != versions[xs.size() + j]) note(static_cast<int>(j));
    }
  }
};

// Each input from its own stream: the first from the seed itself, as when there was one input.
std::vector<torch::Tensor> make_inputs(const std::vector<TensorSpec>& inputs, std::int64_t batch, std::uint64_t seed) {
  std::vector<torch::Tensor> out;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    auto generator = at::detail::createCPUGenerator(seed + 0x9e3779b97f4a7c15ull * k);
    out.push_back(random_batch(inputs[k], batch, generator));
  }
  return out;
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& xs) {
  std::vector<torch::Tensor> out;
  for (const auto& x : xs) out.push_back(x.clone());
  return out;
}

std::string specs_text(const std::vector<TensorSpec>& specs) {
  std::string text;
  for (const auto& spec : specs) text += (text.empty() ? "" : ",") + spec.text();
  return text;
}

// The module's own forward on the probe (on copies, as it may write into its inputs): what the
// layers must compute.
torch::Tensor module_output(torch::jit::Module& module, const std::vector<torch::Tensor>& probe, int output_index,
                            const std::string& inputs_text) {
  try {
    const auto given = clones(probe);
    c10::IValue out = module.forward(std::vector<c10::IValue>(given.begin(), given.end()));
    if (out.isTuple() && output_index >= 0) out = out.toTupleRef().elements().at(static_cast<std::size_t>(output_index));
    if (!out.isTensor()) throw std::runtime_error("it returns a " + out.tagKind() + ", not a tensor");
    return out.toTensor();
  } catch (const std::exception& e) {
    std::string shapes;
    for (const auto& x : probe) shapes += (shapes.empty() ? "" : ", ") + shape_text(x.sizes());
    throw core::InputError("the module's forward fails on a batch of 2 samples of " + inputs_text + " (shape" +
                           (probe.size() > 1 ? "s " : " ") + shapes + "): " + error_text(e));
  }
}

void check_computes_the_same(const torch::Tensor& x, const torch::Tensor& expected, std::size_t layers) {
  if (!x.sizes().equals(expected.sizes()) || !torch::allclose(x, expected, 1e-4, 1e-5)) {
    throw core::InputError("the " + std::to_string(layers) + " layers cut from the module's forward "
                           "do not compute what it does; report this with the module");
  }
}

// Which layers write into their inputs in place is seen in training, where dropout runs (in place,
// for nn.Dropout(inplace=True)); the module's statistics and the random state are put back as they
// were.
void note_writes_in_training(torch::jit::Module& module, ScriptLayers& layers, const std::vector<torch::Tensor>& probe) {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> buffers;
  for (const auto& b : module.buffers()) buffers.emplace_back(b, b.clone());
  auto generator = at::detail::getDefaultCPUGenerator();
  const auto state = generator.get_state();
  module.train();
  try {
    layers.run(clones(probe));
  } catch (const core::InputError&) {
    // A module that cannot train on 2 samples (BatchNorm over one value per channel): the eval run
    // decides.
  }
  module.eval();
  generator.set_state(state);
  for (auto& [buffer, saved] : buffers) buffer.copy_(saved);
}

// A probe batch of two, deterministic and without autograd: the layers must compute what the
// module's own forward computes, and the output tells the target's shape. Folds the dtype reads the
// run shows and notes the layers' in-place writes; returns the layers' output on the probe.
torch::Tensor probe_layers(torch::jit::Module& module, ScriptLayers& layers, const std::vector<TensorSpec>& inputs,
                           int output_index, std::uint64_t seed, const std::string& inputs_text) {
  torch::NoGradGuard no_grad;
  module.eval();
  const std::vector<torch::Tensor> probe = make_inputs(inputs, 2, seed);
  const torch::Tensor expected = module_output(module, probe, output_index, inputs_text);
  const std::vector<torch::Tensor> outputs = layers.run(clones(probe));
  check_computes_the_same(outputs.back(), expected, layers.cut.segments.size());
  std::vector<c10::ScalarType> dtypes;
  for (const auto& t : outputs) dtypes.push_back(t.scalar_type());
  fold_dtypes(layers.cut, dtypes);
  layers.make_functions();
  torch::Tensor probe_output = layers.run(clones(probe)).back();
  check_computes_the_same(probe_output, expected, layers.cut.segments.size());
  note_writes_in_training(module, layers, probe);
  return probe_output;
}

// A layer that writes into one of the batch's inputs (directly, or through a view another layer
// made of it) would change what a checkpoint recomputes from, and the batch itself: layers that
// read that input read a copy of it instead. Takes the batch's inputs out of `written`, leaving the
// writes into earlier layers' outputs, and returns them.
std::set<int> take_input_writes(std::vector<std::vector<int>>& written) {
  std::set<int> inputs_written;
  for (auto& mine : written) {
    for (auto it = mine.begin(); it != mine.end();) {
      if (*it >= 0) {
        ++it;
        continue;
      }
      inputs_written.insert(*it);
      it = mine.erase(it);
    }
  }
  return inputs_written;
}

// The target the loss reads: as given, or found from the probe's output; none where the module
// computes the loss.
std::optional<TensorSpec> target_spec(const ModuleSettings& settings, const torch::Tensor& probe_output) {
  if (settings.loss == "model") {
    if (probe_output.numel() != 1) {
      throw core::InputError("loss: with --loss model the module must return the loss (one number); it returns shape " +
                             shape_text(probe_output.sizes()));
    }
    return std::nullopt;
  }
  if (!settings.target.empty()) return parse_tensor_spec(settings.target, "target");
  return target_for_output(settings.loss, settings.class_dim, probe_output);
}

// Every key resolved, so that model_source() rebuilds the same model.
std::map<std::string, std::string> resolved_config(const ModuleSettings& settings, const LayerSelection& selection,
                                                   const ScriptGraph& cut, const std::optional<TensorSpec>& target) {
  std::map<std::string, std::string> resolved = {{"input", specs_text(settings.inputs)}, {"loss", settings.loss}};
  if (!settings.class_dim.empty()) resolved["class_dim"] = settings.class_dim;
  if (selection.output_index >= 0) resolved["output_index"] = std::to_string(selection.output_index);
  // What rebuilds the same cut: the depth it was made at, or the layers named.
  if (cut.depth > 0) {
    resolved["depth"] = std::to_string(cut.depth);
  } else {
    std::string layer_list;
    for (const auto& name : cut.layer_paths) layer_list += (layer_list.empty() ? "" : ",") + name;
    resolved["layers"] = layer_list;
  }
  if (target) resolved["target"] = target->text();
  return resolved;
}

// A checkpointed block's second run: its batch is already in BatchNorm's running statistics. The
// run updates copies instead (the zoo's BatchNorm skips the update); writing the old values back in
// place would change tensors the backward saved.
torch::Tensor run_on_copied_buffers(torch::jit::GraphFunction& function, const c10::IValue& object,
                                    const std::vector<torch::Tensor>& in, std::optional<c10::ScalarType> dtype,
                                    const std::vector<torch::jit::Module>& called) {
  struct Swapped {
    torch::jit::Module module;
    std::string name;
    torch::Tensor original;
  };
  std::vector<Swapped> swapped;
  for (const auto& c : called) {
    for (auto m : c.modules()) {
      for (const auto& b : m.named_buffers(/*recurse=*/false)) {
        swapped.push_back({m, b.name, b.value});
        m.setattr(b.name, b.value.clone());
      }
    }
  }
  struct Restore {
    std::vector<Swapped>& swapped;
    ~Restore() {
      for (auto& s : swapped) s.module.setattr(s.name, s.original);
    }
  } restore{swapped};
  return run_segment(function, object, in, dtype);
}

// One layer's forward: its graph on the module and its inputs.
struct ScriptLayerForward {
  std::shared_ptr<torch::jit::GraphFunction> function;
  c10::IValue object;
  std::vector<torch::jit::Module> called;  // the submodules its graph calls
  bool batchnorm = false;                  // one of them is (or holds) a BatchNorm
  std::vector<bool> copied;                // per input: a layer writes into it, so this one reads a copy
  bool reads_dtype = false;                // ScriptSegment::reads_activation_dtype

  torch::Tensor operator()(const std::vector<torch::Tensor>& given, const RunContext& context) const {
    // Under bf16 every floating activation is bfloat16 (Layer::run casts what a layer reads).
    const std::optional<c10::ScalarType> dtype =
        reads_dtype ? std::optional(context.precision == core::Precision::Bf16 ? c10::ScalarType::BFloat16
                                                                               : c10::ScalarType::Float)
                    : std::nullopt;
    std::vector<torch::Tensor> copies;
    if (std::find(copied.begin(), copied.end(), true) != copied.end()) {
      copies = given;
      for (std::size_t k = 0; k < copies.size(); ++k) {
        if (copied[k]) copies[k] = copies[k].clone();
      }
    }
    const std::vector<torch::Tensor>& in = copies.empty() ? given : copies;
    if (!(batchnorm && context.recomputing)) return run_segment(*function, object, in, dtype);
    return run_on_copied_buffers(*function, object, in, dtype, called);
  }
};

// Layer i of the cut. A parameter belongs to the first layer that uses it (a shared one is counted
// once): `attributed` holds those taken by earlier layers.
Layer script_layer(const torch::jit::Module& module, const ScriptLayers& layers, std::size_t i,
                   const std::set<int>& inputs_written, std::unordered_set<const void*>& attributed) {
  const ScriptSegment& segment = layers.cut.segments[i];
  Layer layer;
  layer.name = segment.name;
  std::vector<torch::jit::Module> called;
  for (const auto& path : segment.called_modules) called.push_back(*submodule_at(module, path));
  bool batchnorm = false;
  for (const auto& c : called) {
    for (const auto& m : c.modules()) batchnorm |= is_batchnorm(m);
  }
  // "batchnorm" in the kind is what the planner's and executor's BatchNorm notes look for.
  layer.kind = segment.class_name + (batchnorm ? " (batchnorm)" : "");
  layer.inputs = segment.inputs;
  layer.block = segment.block;
  for (const auto& p : parameters_read(module, segment, called)) {
    if (attributed.insert(p.unsafeGetTensorImpl()).second) layer.parameters.push_back(p);
  }
  std::vector<bool> copied(segment.inputs.size(), false);
  for (std::size_t k = 0; k < segment.inputs.size(); ++k) copied[k] = inputs_written.count(segment.inputs[k]) > 0;
  layer.forward = ScriptLayerForward{layers.functions[i], layers.object, called, batchnorm, copied,
                                     segment.reads_activation_dtype};
  return layer;
}

Layer loss_layer(const ModuleSettings& settings, int last) {
  const bool cross_entropy = settings.loss == "cross-entropy";
  const bool classes_last = settings.class_dim == "last";
  Layer layer;
  layer.name = "loss";
  layer.kind = "loss";
  layer.inputs = {last, kTargetInput};
  layer.forward = [cross_entropy, classes_last](const std::vector<torch::Tensor>& in, const RunContext&) {
    const auto& x = in[0];
    if (cross_entropy && classes_last) return torch::cross_entropy_loss(x.reshape({-1, x.size(-1)}), in[1].reshape({-1}));
    if (cross_entropy) return torch::cross_entropy_loss(x, in[1]);  // classes along dimension 1, as PyTorch's
    return torch::mse_loss(x, in[1]);
  };
  return layer;
}

// The loss on a probe batch: a target that does not fit the output is refused here, not mid-profile.
void check_loss_on_probe(const Model& model, std::uint64_t seed, const std::string& loss,
                         const torch::Tensor& probe_output, const std::optional<TensorSpec>& target) {
  torch::NoGradGuard no_grad;
  try {
    const torch::Tensor value = model.forward(model.make_batch(2, seed));
    if (value.numel() != 1) throw std::runtime_error("the loss is not one number");
  } catch (const std::exception& e) {
    throw core::InputError("the loss (" + loss + ") fails on the module's output " + shape_text(probe_output.sizes()) +
                           (target ? " and a target of " + target->text() : std::string()) + ": " + error_text(e));
  }
}

Model load_module(const std::string& path, const std::map<std::string, std::string>& config, std::uint64_t seed,
                  const std::string& expected_sha256) {
  const ModuleSettings settings = read_module_settings(config);
  LoadedModule loaded = load_script_file(path, expected_sha256);
  torch::jit::Module& module = loaded.module;
  const LayerSelection selection = layer_selection(config);
  check_forward_takes(module, path, settings.inputs.size());
  ScriptLayers layers(module, cut_into_layers(module, selection));
  const torch::Tensor probe_output =
      probe_layers(module, layers, settings.inputs, selection.output_index, seed, specs_text(settings.inputs));
  const std::set<int> inputs_written = take_input_writes(layers.written);
  assign_blocks(layers.cut, layers.written);
  const std::optional<TensorSpec> target = target_spec(settings, probe_output);

  const std::string stem = std::filesystem::path(path).stem().string();
  Model model(stem.empty() ? "torchscript" : stem, Config("torchscript", resolved_config(settings, selection, layers.cut, target)));
  std::unordered_set<const void*> attributed;
  for (std::size_t i = 0; i < layers.cut.segments.size(); ++i) {
    model.add_layer(script_layer(module, layers, i, inputs_written, attributed));
  }
  if (settings.loss != "model") model.add_layer(loss_layer(settings, static_cast<int>(layers.cut.segments.size()) - 1));
  model.set_batch_generator(synthetic_batches(settings.inputs, target));
  check_loss_on_probe(model, seed, settings.loss, probe_output, target);
  model.set_foreign_modules(std::make_shared<ScriptModules>(module), loaded.file);
  model.set_training(true);
  return model;
}

}  // namespace

TensorSpec target_for_output(const std::string& loss, const std::string& class_dim, const torch::Tensor& output) {
  if (loss == "cross-entropy") {
    if (output.dim() < 2) {
      throw core::InputError("loss: cross-entropy needs class scores along a dimension of the output; one sample's "
                             "output is a single number (use --loss mse or model)");
    }
    // One class index per position the scores are for: every dimension but the batch and the classes.
    const std::int64_t classes = class_dim == "last" ? output.dim() - 1 : 1;
    TensorSpec t{{}, "int64", 0, output.size(classes)};
    for (std::int64_t d = 1; d < output.dim(); ++d) {
      if (d != classes) t.shape.push_back(output.size(d));
    }
    return t;
  }
  TensorSpec t{{}, "float32"};
  for (std::int64_t d = 1; d < output.dim(); ++d) t.shape.push_back(output.size(d));
  return t;
}

BatchGenerator synthetic_batches(const std::vector<TensorSpec>& inputs, const std::optional<TensorSpec>& target) {
  return [inputs, target](std::int64_t batch, std::uint64_t s) {
    Batch b;
    auto xs = make_inputs(inputs, batch, s);
    b.input = xs.front();
    b.further_inputs.assign(xs.begin() + 1, xs.end());
    if (target) {
      // Its own stream, so the input does not depend on whether there is a target.
      auto generator = at::detail::createCPUGenerator(s ^ 0x7a26e7ull);
      b.target = random_batch(*target, batch, generator);
    } else {
      b.target = torch::empty({batch, 0});  // the module's loss reads none; concatenation still works
    }
    return b;
  };
}

Model load_torchscript_model(const std::string& path, const std::map<std::string, std::string>& config,
                             std::uint64_t seed, const std::string& expected_sha256) {
  // Loading keeps each function's debug records (source ranges for error messages) for the module's
  // life: memory the budget counts, measured here with the rest.
  return counting_build_allocations([&] { return load_module(path, config, seed, expected_sha256); });
}

}  // namespace headroom::models
