#include "models/model_source.h"

#include "models/torchscript_model.h"
#include "models/zoo.h"

namespace headroom::models {

Model build_model(const ModelSource& source, std::uint64_t seed) {
  if (source.file) return load_torchscript_model(source.file->path, source.config, seed, source.file->sha256);
  return build_zoo_model(source.name, source.config, seed);
}

ModelSource model_source(const Model& model) { return {model.name(), model.config().values(), model.file()}; }

}  // namespace headroom::models
