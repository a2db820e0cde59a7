#include "models/zoo.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/errors.h"
#include "core/host_memory.h"
#include "core/units.h"
#include "models/build_allocations.h"

namespace headroom::models {

namespace {

std::vector<Preset> transformer_presets(bool decoder) {
  // Sizes follow the published BERT miniatures and BERT/GPT-2 base and large; vocab and seq are
  // keys of their own so a small CPU run can shrink them.
  if (decoder) {
    return {{"tiny", {{"layers", "2"}, {"hidden", "128"}, {"heads", "2"}}},
            {"mini", {{"layers", "4"}, {"hidden", "256"}, {"heads", "4"}}},
            {"small", {{"layers", "12"}, {"hidden", "768"}, {"heads", "12"}}},
            {"medium", {{"layers", "24"}, {"hidden", "1024"}, {"heads", "16"}}},
            {"large", {{"layers", "36"}, {"hidden", "1280"}, {"heads", "20"}}}};
  }
  return {{"tiny", {{"layers", "2"}, {"hidden", "128"}, {"heads", "2"}}},
          {"mini", {{"layers", "4"}, {"hidden", "256"}, {"heads", "4"}}},
          {"small", {{"layers", "4"}, {"hidden", "512"}, {"heads", "8"}}},
          {"medium", {{"layers", "8"}, {"hidden", "512"}, {"heads", "8"}}},
          {"base", {{"layers", "12"}, {"hidden", "768"}, {"heads", "12"}}},
          {"large", {{"layers", "24"}, {"hidden", "1024"}, {"heads", "16"}}}};
}

std::vector<ConfigKey> transformer_keys(const std::string& default_preset, const std::string& vocab,
                                        bool classifier) {
  std::vector<ConfigKey> keys{
      {"preset", default_preset, "size preset; the keys below override it"},
      {"layers", "", "number of blocks"},
      {"hidden", "", "model width"},
      {"heads", "", "attention heads (divide hidden)"},
      {"ffn", "0", "feed-forward width; 0 means 4 x hidden"},
      {"seq", "128", "sequence length"},
      {"vocab", vocab, "vocabulary size"},
      {"dropout", "0.1", "dropout probability"},
  };
  if (classifier) keys.push_back({"classes", "2", "output classes"});
  return keys;
}

std::vector<ZooEntry> make_zoo() {
  return {
      {"mlp",
       "multilayer perceptron (linear + GELU blocks); target: the argmax of a fixed random teacher",
       {{"input", "256", "input features"},
        {"hidden", "512", "hidden width"},
        {"depth", "4", "number of linear + GELU blocks"},
        {"classes", "10", "output classes"}},
       {},
       &build_mlp,
       &estimate_mlp},
      {"cnn",
       "ResNet-style CNN (conv, BatchNorm, ReLU, residual skips); target: class of a noisy class template",
       {{"image", "28", "image height and width"},
        {"channels", "1", "input channels"},
        {"width", "16", "channels of the first stage (doubling per stage)"},
        {"stages", "3", "number of stages (each after the first halves the resolution)"},
        {"blocks", "1", "residual blocks per stage"},
        {"classes", "10", "output classes"}},
       {},
       &build_cnn,
       &estimate_cnn},
      {"bert",
       "Transformer encoder (post-LN BERT) with sequence classification; target: first token mod classes",
       transformer_keys("mini", "30522", true),
       transformer_presets(false),
       &build_bert,
       &estimate_bert},
      {"gpt",
       "Transformer decoder (pre-LN GPT) with causal attention; target: the next token of arithmetic sequences",
       transformer_keys("tiny", "8192", false),
       transformer_presets(true),
       &build_gpt,
       &estimate_gpt},
      {"clip",
       "CLIP-style pair of towers (CNN images, Transformer encoder captions) under a symmetric contrastive loss with a "
       "learnable log-scale; pairs: a concept's image template plus noise with its caption, a tenth of its tokens "
       "replaced",
       {{"image", "16", "image height and width"},
        {"channels", "1", "image channels"},
        {"width", "8", "channels of the image tower's first convolution (doubled by the second)"},
        {"seq", "8", "caption length"},
        {"vocab", "256", "vocabulary size"},
        {"hidden", "32", "text tower width"},
        {"heads", "2", "attention heads (divide hidden)"},
        {"layers", "1", "text tower blocks"},
        {"dropout", "0.1", "dropout probability in the text tower"},
        {"dim", "32", "embedding dimension of both towers' projections"},
        {"concepts", "1024", "distinct image-caption concepts"}},
       {},
       &build_clip,
       &estimate_clip},
  };
}

// The least that training the model needs: fp32 parameters, their gradients, what it builds.
void check_size(const ZooEntry& entry, const Config& config, const std::map<std::string, std::string>& overrides) {
  const SizeEstimate size = entry.estimate(config);
  const double needed = 8 * size.parameters + size.built_bytes;
  std::int64_t available = core::available_host_memory_bytes();
  if (available <= 0) available = static_cast<std::int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  if (needed <= static_cast<double>(available)) return;
  std::string settings;
  for (const auto& [key, value] : overrides) settings += (settings.empty() ? "" : ", ") + key + "=" + value;
  char parameters[32];
  std::snprintf(parameters, sizeof parameters, "%.3g", size.parameters);
  const double capped = std::min(needed, 9e18);  // format_bytes takes an int64; past it the size is absurd anyway
  throw core::InputError("model " + entry.name + ": " + (settings.empty() ? "its default settings" : "the settings " + settings) +
                         " make about " + parameters + " parameters, which with their gradients and what the model builds need " +
                         (capped < needed ? "over " : "") + core::format_bytes(static_cast<std::int64_t>(capped)) +
                         ", more than the " + core::format_bytes(available) +
                         " of memory this host has available; choose smaller settings");
}

}  // namespace

const std::vector<ZooEntry>& zoo() {
  static const std::vector<ZooEntry> entries = make_zoo();
  return entries;
}

const ZooEntry& find_zoo_entry(const std::string& name) {
  std::string known;
  for (const auto& entry : zoo()) {
    if (entry.name == name) return entry;
    known += (known.empty() ? "" : ", ") + entry.name;
  }
  throw core::InputError("unknown model '" + name + "' (known: " + known + ")");
}

Model build_zoo_model(const std::string& name, const std::map<std::string, std::string>& overrides,
                      std::uint64_t seed) {
  const ZooEntry& entry = find_zoo_entry(name);
  const Config config = resolve_config(entry.name, entry.keys, entry.presets, overrides);
  check_size(entry, config, overrides);
  return counting_build_allocations([&] { return entry.build(config, seed); });
}

}  // namespace headroom::models
