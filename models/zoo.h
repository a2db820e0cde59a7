#pragma once
// The model zoo: real libtorch models built from the layer library, sized by config keys.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/model.h"

namespace headroom::models {

// A model's size from its settings alone, in doubles so no setting can overflow it: what building
// it would allocate, known before anything is.
struct SizeEstimate {
  double parameters = 0;   // fp32 elements
  double built_bytes = 0;  // what else the model holds from its build: a teacher, class templates, masks
};

struct ZooEntry {
  std::string name;
  std::string description;
  std::vector<ConfigKey> keys;
  std::vector<Preset> presets;
  Model (*build)(const Config& config, std::uint64_t seed);
  SizeEstimate (*estimate)(const Config& config);
};

const std::vector<ZooEntry>& zoo();
// Throws InputError naming the model and listing the known ones.
const ZooEntry& find_zoo_entry(const std::string& name);

// Builds `name` with `overrides` applied (see resolve_config); parameters are initialised
// deterministically from `seed`. Settings whose model (its parameters, their gradients and what it
// builds besides) would not fit in the host's available memory are refused first, with InputError
// naming them: a typo of a size must not grow the process until the system kills it.
Model build_zoo_model(const std::string& name, const std::map<std::string, std::string>& overrides,
                      std::uint64_t seed = 0);

// The builders, one per zoo model (zoo_*.cpp).
Model build_mlp(const Config& config, std::uint64_t seed);
Model build_cnn(const Config& config, std::uint64_t seed);
Model build_bert(const Config& config, std::uint64_t seed);
Model build_gpt(const Config& config, std::uint64_t seed);
Model build_clip(const Config& config, std::uint64_t seed);
SizeEstimate estimate_mlp(const Config& config);
SizeEstimate estimate_cnn(const Config& config);
SizeEstimate estimate_bert(const Config& config);
SizeEstimate estimate_gpt(const Config& config);
SizeEstimate estimate_clip(const Config& config);

// Data that does not depend on the batch seed (a teacher, class templates) uses this fixed seed,
// so every batch poses the same task.
inline constexpr std::uint64_t kTaskSeed = 0x5eed;

}  // namespace headroom::models
