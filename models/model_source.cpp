#include "models/model_source.h"

#include "models/zoo.h"

namespace headroom::models {

Model build_model(const ModelSource& source, std::uint64_t seed) {
  return build_zoo_model(source.name, source.config, seed);
}

ModelSource model_source(const Model& model) { return {model.name(), model.config().values()}; }

}  // namespace headroom::models
