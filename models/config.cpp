#include "models/config.h"

#include <cmath>

#include "core/errors.h"

namespace headroom::models {

using core::InputError;

const std::string& Config::text(const std::string& key) const {
  const auto it = values_.find(key);
  if (it == values_.end()) throw InputError("model " + model_name_ + ": no key '" + key + "'");
  return it->second;
}

std::int64_t Config::non_negative_int(const std::string& key) const {
  const std::string& value = text(key);
  std::size_t used = 0;
  long long v = -1;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty() || v < 0) {
    throw InputError("model " + model_name_ + ": key '" + key + "' expects a non-negative integer, got '" + value + "'");
  }
  // No size setting of the zoo goes near this; past it, sizes multiplied together overflow or eat
  // the machine before a budget could refuse them.
  if (v > kMaxSetting) {
    throw InputError("model " + model_name_ + ": key '" + key + "' expects at most " + std::to_string(kMaxSetting) +
                     ", got " + value);
  }
  return v;
}

std::int64_t Config::positive_int(const std::string& key) const {
  const std::int64_t v = non_negative_int(key);
  if (v == 0) throw InputError("model " + model_name_ + ": key '" + key + "' must be positive, got 0");
  return v;
}

double Config::probability(const std::string& key) const {
  const std::string& value = text(key);
  std::size_t used = 0;
  double v = -1;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty() || !(v >= 0.0 && v < 1.0)) {
    throw InputError("model " + model_name_ + ": key '" + key + "' expects a probability in [0, 1), got '" + value + "'");
  }
  return v;
}

Config resolve_config(const std::string& model_name, const std::vector<ConfigKey>& keys,
                      const std::vector<Preset>& presets, const std::map<std::string, std::string>& overrides) {
  std::map<std::string, std::string> values;
  std::string known;
  for (const auto& key : keys) {
    values[key.name] = key.default_value;
    known += (known.empty() ? "" : ", ") + key.name;
  }
  for (const auto& [key, value] : overrides) {
    if (!values.contains(key)) {
      throw InputError("model " + model_name + ": unknown key '" + key + "' (known: " + known + ")");
    }
  }
  if (values.contains("preset")) {
    const std::string chosen = overrides.contains("preset") ? overrides.at("preset") : values.at("preset");
    const Preset* preset = nullptr;
    std::string names;
    for (const auto& p : presets) {
      if (p.name == chosen) preset = &p;
      names += (names.empty() ? "" : ", ") + p.name;
    }
    if (preset == nullptr) {
      throw InputError("model " + model_name + ": unknown preset '" + chosen + "' (known: " + names + ")");
    }
    for (const auto& [key, value] : preset->values) values[key] = value;
  }
  for (const auto& [key, value] : overrides) values[key] = value;
  return Config(model_name, std::move(values));
}

std::pair<std::string, std::string> parse_setting(const std::string& item) {
  const auto eq = item.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
    throw InputError("setting: expected key=value, got '" + item + "'");
  }
  return {item.substr(0, eq), item.substr(eq + 1)};
}

}  // namespace headroom::models
