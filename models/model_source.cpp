#include "models/model_source.h"

#include <string>

#include "core/errors.h"
#include "models/torchscript_model.h"
#include "models/zoo.h"

namespace headroom::models {

Model build_model(const ModelSource& source, std::uint64_t seed) {
  if (source.capture == "eager") {
    throw core::InputError(source.name + " was captured in eager PyTorch (headroom.profile from Python), and there is no "
                           "file to build it from: run its plans in your own training loop with headroom.apply");
  }
  Model model = source.file ? load_torchscript_model(source.file->path, source.config, seed, source.file->sha256)
                            : build_zoo_model(source.name, source.config, seed);
  model.freeze(source.freeze);
  return model;
}

ModelSource model_source(const Model& model) {
  return {model.name(), model.config().values(), model.file(), model.freeze_patterns(), model.capture()};
}

Model build_traced_model(const core::Trace& trace, std::uint64_t seed) {
  Model model = build_model(trace.model, seed);
  // A module is cut by this headroom's rules, which may differ from the ones that recorded the trace:
  // the same names reading other layers, or in other blocks, would run another plan than was made.
  const std::string what = trace.model.file ? "the module " + trace.model.file->path + " as headroom now cuts it"
                                            : "the zoo's " + trace.model.name;
  const std::string again = trace.model.file ? " (profile it again)" : "";
  if (model.layers().size() != trace.layers.size()) {
    throw core::InputError(what + " has " + std::to_string(model.layers().size()) + " layers but the trace has " +
                           std::to_string(trace.layers.size()) + again);
  }
  for (std::size_t i = 0; i < trace.layers.size(); ++i) {
    const Layer& layer = model.layers()[i];
    const core::LayerProfile& traced = trace.layers[i];
    if (layer.name != traced.name) {
      throw core::InputError(what + " differs from the trace at layer " + std::to_string(i) + " (" + layer.name +
                             " vs " + traced.name + ")" + again);
    }
    if (layer.inputs != traced.inputs || layer.block != traced.block) {
      throw core::InputError(what + " differs from the trace at layer " + std::to_string(i) + " (" + layer.name +
                             "): it reads other inputs or sits in another block" + again);
    }
  }
  model.set_precision(trace.precision);  // run as it was measured
  return model;
}

}  // namespace headroom::models
