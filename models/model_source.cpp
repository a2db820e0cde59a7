#include "models/model_source.h"

#include <string>

#include "core/errors.h"
#include "models/torchscript_model.h"
#include "models/zoo.h"

namespace headroom::models {

Model build_model(const ModelSource& source, std::uint64_t seed) {
  if (source.file) return load_torchscript_model(source.file->path, source.config, seed, source.file->sha256);
  return build_zoo_model(source.name, source.config, seed);
}

ModelSource model_source(const Model& model) { return {model.name(), model.config().values(), model.file()}; }

Model build_traced_model(const core::Trace& trace, std::uint64_t seed) {
  Model model = build_model(trace.model, seed);
  if (model.layers().size() != trace.layers.size()) {
    throw core::InputError("the zoo's " + trace.model.name + " has " + std::to_string(model.layers().size()) +
                           " layers but the trace has " + std::to_string(trace.layers.size()));
  }
  for (std::size_t i = 0; i < trace.layers.size(); ++i) {
    if (model.layers()[i].name != trace.layers[i].name) {
      throw core::InputError("the zoo's " + trace.model.name + " differs from the trace at layer " + std::to_string(i) +
                             " (" + model.layers()[i].name + " vs " + trace.layers[i].name + ")");
    }
  }
  return model;
}

}  // namespace headroom::models
