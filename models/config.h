#pragma once
// A model's size settings: every key has a default and a meaning; `--set key=value` overrides them,
// and a preset (bert's `preset=base`) sets several at once. Torch-free so the CLI can list them.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace headroom::models {

struct ConfigKey {
  std::string name;
  std::string default_value;
  std::string help;
};

// A preset names values for some keys; explicit overrides win over it.
struct Preset {
  std::string name;
  std::map<std::string, std::string> values;
};

// The largest integer a size setting takes.
inline constexpr std::int64_t kMaxSetting = std::int64_t{1} << 20;

class Config {
 public:
  Config(std::string model_name, std::map<std::string, std::string> values)
      : model_name_(std::move(model_name)), values_(std::move(values)) {}

  // Typed access; a value of the wrong form throws InputError naming the model and key.
  std::int64_t positive_int(const std::string& key) const;
  std::int64_t non_negative_int(const std::string& key) const;
  double probability(const std::string& key) const;
  const std::string& text(const std::string& key) const;

  const std::map<std::string, std::string>& values() const { return values_; }

 private:
  std::string model_name_;
  std::map<std::string, std::string> values_;
};

// Defaults, then the preset (overrides' "preset" or the default one), then the overrides.
// Unknown keys and unknown presets throw InputError listing what is known.
Config resolve_config(const std::string& model_name, const std::vector<ConfigKey>& keys,
                      const std::vector<Preset>& presets, const std::map<std::string, std::string>& overrides);

// Parses one "key=value" setting; throws InputError naming the field "setting" on a malformed item.
std::pair<std::string, std::string> parse_setting(const std::string& item);

}  // namespace headroom::models
