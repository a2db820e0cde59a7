#include "core/precision.h"

#include <optional>

#include "core/errors.h"
#include "core/precision_json.h"

namespace headroom::core {

namespace {

std::optional<Precision> find_precision(std::string_view name) {
  for (const auto& entry : kPrecisions) {
    if (entry.name == name) return entry.id;
  }
  return std::nullopt;
}

}  // namespace

std::string_view precision_name(Precision precision) {
  for (const auto& entry : kPrecisions) {
    if (entry.id == precision) return entry.name;
  }
  return "fp32";
}

std::string precision_names() {
  std::string out;
  for (const auto& entry : kPrecisions) out += (out.empty() ? "" : ", ") + std::string(entry.name);
  return out;
}

Precision parse_precision(std::string_view text, std::string_view field) {
  if (const auto found = find_precision(text)) return *found;
  throw InputError(std::string(field) + ": '" + std::string(text) + "' is not a precision (known: " + precision_names() + ")");
}

Precision read_precision(const JsonNode& node) {
  const std::string name = node.as_string();
  if (const auto found = find_precision(name)) return *found;
  node.fail("'" + name + "' is not a precision (known: " + precision_names() + ")");
}

}  // namespace headroom::core
