#pragma once
// Names a file written by one side and read by another must agree on. The readers refuse any
// other name, listing these, so a misspelt one is an error where it is read rather than a silent
// change of meaning later (a BatchNorm layer the planner's notes do not see). Optimizers are
// core/optimizer_spec.h's. The techniques a plan may name are core/strategies.h's.
#include <algorithm>
#include <array>
#include <span>
#include <string>
#include <string_view>

namespace headroom::core {

// The layer kinds the zoo's models are built of (models/layers.cpp and the zoo_*.cpp files). A
// TorchScript module's layers are named after their module's class (models/torchscript_model.cpp),
// any name a user gives one, so a trace of a module (one with "model.file") may have any kind.
inline constexpr std::array<std::string_view, 15> kZooLayerKinds{
    "add",   "attention", "batchnorm", "contrastive_loss", "conv",   "dropout", "embedding", "gelu",
    "l2norm", "layernorm", "linear",   "loss",             "pool",   "pooler",  "relu"};

inline bool is_known(std::span<const std::string_view> names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// "sgd, adam": for messages.
inline std::string name_list(std::span<const std::string_view> names) {
  std::string out;
  for (const auto name : names) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

}  // namespace headroom::core
