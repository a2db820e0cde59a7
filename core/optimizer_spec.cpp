#include "core/optimizer_spec.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/errors.h"

namespace headroom::core {

namespace {

std::string momentum_text(double momentum) {
  std::ostringstream out;
  out.precision(6);
  out << momentum;
  return out.str();
}

void check_momentum(double momentum, std::string_view field) {
  if (!(momentum >= 0 && momentum < 1)) {
    throw InputError(std::string(field) + ": momentum must be at least 0 and below 1, got " + momentum_text(momentum));
  }
}

}  // namespace

int OptimizerSpec::state_buffers() const {
  if (kind == Kind::Sgd) return momentum == 0 ? 0 : 1;
  return amsgrad ? 3 : 2;
}

std::string OptimizerSpec::text() const {
  switch (kind) {
    case Kind::Sgd: return momentum == kDefaultSgdMomentum ? "sgd" : "sgd(momentum=" + momentum_text(momentum) + ")";
    case Kind::Adam: return amsgrad ? "adam(amsgrad)" : "adam";
    case Kind::AdamW: return amsgrad ? "adamw(amsgrad)" : "adamw";
  }
  return "adam";
}

std::optional<OptimizerSpec> optimizer_spec_of(std::string_view text) {
  const std::size_t open = text.find('(');
  const std::string_view name = text.substr(0, open);
  std::string_view setting;
  if (open != std::string_view::npos) {
    if (text.back() != ')') return std::nullopt;
    setting = text.substr(open + 1, text.size() - open - 2);
  }
  OptimizerSpec spec;
  if (name == "sgd") {
    spec.kind = OptimizerSpec::Kind::Sgd;
    if (open == std::string_view::npos) return spec;
    constexpr std::string_view kMomentum = "momentum=";
    if (setting.substr(0, kMomentum.size()) != kMomentum) return std::nullopt;
    const std::string value(setting.substr(kMomentum.size()));
    char* end = nullptr;
    spec.momentum = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size()) return std::nullopt;
    if (!(spec.momentum >= 0 && spec.momentum < 1)) return std::nullopt;
    return spec;
  }
  if (name != "adam" && name != "adamw") return std::nullopt;
  spec.kind = name == "adam" ? OptimizerSpec::Kind::Adam : OptimizerSpec::Kind::AdamW;
  if (open != std::string_view::npos && setting != "amsgrad") return std::nullopt;
  spec.amsgrad = open != std::string_view::npos;
  return spec;
}

OptimizerSpec parse_optimizer_spec(std::string_view text, std::string_view field) {
  if (const auto spec = optimizer_spec_of(text)) return *spec;
  throw InputError(std::string(field) + ": unknown optimizer '" + std::string(text) + "' (known: " + kOptimizerForms + ")");
}

OptimizerSpec optimizer_spec_from_flags(std::string_view name, const double* momentum, bool amsgrad) {
  OptimizerSpec spec = parse_optimizer_spec(name, "--optimizer");
  if (momentum != nullptr) {
    if (spec.kind != OptimizerSpec::Kind::Sgd) {
      throw InputError("--momentum: only SGD has a momentum setting, and --optimizer is " + std::string(name));
    }
    check_momentum(*momentum, "--momentum");
    spec.momentum = *momentum;
  }
  if (amsgrad) {
    if (spec.kind == OptimizerSpec::Kind::Sgd) throw InputError("--amsgrad: only adam and adamw have amsgrad, and --optimizer is sgd");
    spec.amsgrad = true;
  }
  return spec;
}

}  // namespace headroom::core
