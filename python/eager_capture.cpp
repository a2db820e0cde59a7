#include "python/eager_capture.h"

#include <pybind11/stl.h>
#include <torch/extension.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "models/torchscript_model.h"

namespace py = pybind11;

namespace headroom::python {
namespace {

// A Python object held from C++ code that runs without the GIL: copies share it without touching
// Python's reference counts, and the last one lets it go under the GIL.
class Held {
 public:
  explicit Held(py::object object) : object_(std::move(object)) {}
  ~Held() {
    py::gil_scoped_acquire gil;
    object_ = py::object();
  }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  // Call with the GIL held.
  const py::object& get() const { return object_; }

 private:
  py::object object_;
};

// The profiler's observer as the capture's forward hooks call it: the pointer lives for one forward.
struct ObserverHandle {
  models::LayerObserver* observer = nullptr;
  void before(int layer) const {
    if (observer != nullptr) observer->before_layer(layer);
  }
  void after(int layer, const torch::Tensor& output) const {
    if (observer != nullptr) observer->after_layer(layer, output);
  }
};

// The module's parameters, buffers and modes, reached through the capture.
class PythonModules : public models::ForeignModules {
 public:
  explicit PythonModules(std::shared_ptr<Held> capture) : capture_(std::move(capture)) {}

  std::vector<torch::Tensor> parameters() const override {
    std::vector<torch::Tensor> out;
    for (auto& [name, p] : named_parameters()) out.push_back(p);
    return out;
  }
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const override {
    py::gil_scoped_acquire gil;
    return capture_->get().attr("named_parameters")().cast<std::vector<std::pair<std::string, torch::Tensor>>>();
  }
  std::vector<torch::Tensor> buffers() const override {
    py::gil_scoped_acquire gil;
    return capture_->get().attr("buffers")().cast<std::vector<torch::Tensor>>();
  }
  void to(torch::Device device) override {
    // Its tensors are the user's, where the user put them: the package profiles on the CPU.
    if (!device.is_cpu()) throw core::InputError("device: a module captured in eager PyTorch is profiled on the CPU");
  }
  void set_modes(bool training, bool dropout, bool batchnorm_eval) override {
    py::gil_scoped_acquire gil;
    capture_->get().attr("set_modes")(training, dropout, batchnorm_eval);
  }

 private:
  std::shared_ptr<Held> capture_;
};

// Layers do not run alone in a model run whole (Model::forward_to refuses first); a call would be a bug.
torch::Tensor runs_only_whole(const std::vector<torch::Tensor>& /*inputs*/, const models::RunContext& /*context*/) {
  throw std::logic_error("a layer of an eager capture ran alone");
}

struct CapturedLayers {
  std::vector<models::Layer> layers;
  models::KnownSaves saves;
};

CapturedLayers read_layers(const py::object& capture) {
  CapturedLayers out;
  for (const py::handle layer : capture.attr("layers")) {
    models::Layer l;
    l.name = layer.attr("name").cast<std::string>();
    l.kind = layer.attr("kind").cast<std::string>();
    l.inputs = layer.attr("inputs").cast<std::vector<int>>();
    l.block = layer.attr("block").cast<int>();
    l.parameters = layer.attr("parameters").cast<std::vector<torch::Tensor>>();
    l.forward = runs_only_whole;
    out.saves.inputs.push_back(layer.attr("saves_inputs").cast<std::vector<bool>>());
    out.saves.output.push_back(layer.attr("keeps_output").cast<bool>());
    out.layers.push_back(std::move(l));
  }
  return out;
}

// The module's forward on a synthetic batch: the capture's run(), with the profiler's observer.
models::WholeForward forward_of(std::shared_ptr<Held> capture) {
  return [capture](const models::Batch& batch, models::LayerObserver* observer) {
    py::gil_scoped_acquire gil;
    std::vector<torch::Tensor> inputs{batch.input};
    inputs.insert(inputs.end(), batch.further_inputs.begin(), batch.further_inputs.end());
    ObserverHandle handle{observer};
    const py::object loss = capture->get().attr("run")(inputs, batch.target, py::cast(&handle, py::return_value_policy::reference));
    return loss.cast<torch::Tensor>();
  };
}

}  // namespace

models::Model build_eager_model(py::object capture_object) {
  py::gil_scoped_acquire gil;
  auto capture = std::make_shared<Held>(std::move(capture_object));
  const py::object& c = capture->get();
  std::vector<models::TensorSpec> inputs;
  for (const auto& text : c.attr("input_specs").cast<std::vector<std::string>>()) {
    inputs.push_back(models::parse_tensor_spec(text, "example_inputs"));
  }
  const auto target_text = c.attr("target_spec").cast<std::string>();
  const std::optional<models::TensorSpec> target =
      target_text.empty() ? std::nullopt : std::optional(models::parse_tensor_spec(target_text, "example_targets"));
  models::Model model(c.attr("name").cast<std::string>(),
                      models::Config("eager", c.attr("config").cast<std::map<std::string, std::string>>()));
  CapturedLayers captured = read_layers(c);
  for (auto& layer : captured.layers) model.add_layer(std::move(layer));
  model.set_batch_generator(models::synthetic_batches(inputs, target));
  model.set_whole_forward(std::make_shared<PythonModules>(capture), forward_of(capture), std::move(captured.saves), "eager");
  // Resident for the module's life besides its parameters: its buffers (BatchNorm's statistics).
  std::int64_t buffer_bytes = 0;
  for (const auto& b : model.buffers()) buffer_bytes += static_cast<std::int64_t>(b.storage().nbytes());
  model.set_extra_resident_bytes(buffer_bytes);
  model.set_training(true);
  return model;
}

void bind_eager_capture(py::module_& m) {
  py::class_<ObserverHandle>(m, "LayerObserver")
      .def("before", &ObserverHandle::before)
      .def("after", &ObserverHandle::after);
  // A batch as the profiler draws it (models::synthetic_batches): (inputs, target or None).
  m.def("synthetic_batch", [](const std::vector<std::string>& input_specs, const std::string& target_spec,
                              std::int64_t batch, std::uint64_t seed) {
    std::vector<models::TensorSpec> inputs;
    for (const auto& text : input_specs) inputs.push_back(models::parse_tensor_spec(text, "example_inputs"));
    const std::optional<models::TensorSpec> target =
        target_spec.empty() ? std::nullopt : std::optional(models::parse_tensor_spec(target_spec, "example_targets"));
    const models::Batch b = models::synthetic_batches(inputs, target)(batch, seed);
    std::vector<torch::Tensor> tensors{b.input};
    tensors.insert(tensors.end(), b.further_inputs.begin(), b.further_inputs.end());
    return py::make_tuple(tensors, target ? py::cast(b.target) : py::none());
  });
  // The target spec a loss of headroom's reads against a batch-first output (models::target_for_output).
  m.def("target_for_output", [](const std::string& loss, const std::string& class_dim, const torch::Tensor& output) {
    return models::target_for_output(loss, class_dim, output).text();
  });
}

}  // namespace headroom::python
