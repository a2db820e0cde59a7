#include "core/precision.h"

#include "core/errors.h"

namespace headroom::core {

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
  for (const auto& entry : kPrecisions) {
    if (entry.name == text) return entry.id;
  }
  throw InputError(std::string(field) + ": '" + std::string(text) + "' is not a precision (known: " + precision_names() + ")");
}

}  // namespace headroom::core
