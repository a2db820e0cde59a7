#pragma once
// An optimizer as the user configured it, as far as it decides what the optimizer keeps: SGD keeps
// a momentum buffer per parameter only when its momentum is not 0; Adam and AdamW keep two moments,
// three with amsgrad. Learning rates, weight decay, dampening and Nesterov change no byte, so they
// are not part of it. Written as text in traces and plans ("sgd", "sgd(momentum=0)",
// "adam(amsgrad)"): "sgd" alone is SGD with momentum 0.9, as traces from before the settings were
// recorded mean it.
#include <optional>
#include <string>
#include <string_view>

namespace headroom::core {

struct OptimizerSpec {
  enum class Kind { Sgd, Adam, AdamW };
  Kind kind = Kind::Adam;
  double momentum = 0.9;  // SGD's
  bool amsgrad = false;   // Adam's and AdamW's

  // float32 buffers the optimizer keeps per trainable parameter element.
  int state_buffers() const;
  // The canonical text: parse_optimizer_spec(text()) == *this.
  std::string text() const;
  bool operator==(const OptimizerSpec&) const = default;
};

// The default SGD momentum, what "sgd" alone means.
inline constexpr double kDefaultSgdMomentum = 0.9;

// The forms an optimizer's text takes, for messages.
inline constexpr const char* kOptimizerForms = "sgd, sgd(momentum=M), adam, adam(amsgrad), adamw, adamw(amsgrad)";

// The spec `text` writes (one of kOptimizerForms, M at least 0 and below 1); nullopt for another text.
std::optional<OptimizerSpec> optimizer_spec_of(std::string_view text);

// Parses "sgd", "sgd(momentum=0)", "adam", "adam(amsgrad)", "adamw", "adamw(amsgrad)". Throws
// InputError "<field>: ..." naming what is wrong and the forms known.
OptimizerSpec parse_optimizer_spec(std::string_view text, std::string_view field = "optimizer");

// The command line's flags as one spec: `--optimizer sgd --momentum 0`, `--optimizer adam --amsgrad`.
// A momentum below 0 or at 1 and above, a momentum for Adam or amsgrad for SGD throw InputError
// naming the flag.
OptimizerSpec optimizer_spec_from_flags(std::string_view name, const double* momentum, bool amsgrad);

}  // namespace headroom::core
