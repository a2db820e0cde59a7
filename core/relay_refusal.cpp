#include "core/relay_refusal.h"

namespace headroom::core {

std::string l2l_refusal(const Trace& trace) {
  if (trace.contrastive_loss) {
    return "its contrastive loss couples every micro-batch, and the relay computes each micro-batch's loss alone";
  }
  if (trace.model.file) return "it is a TorchScript module, and the relay runs only the zoo's models stage by stage";
  if (is_autocast(trace.precision)) {
    // Measured on the zoo's mlp: the relay's device peak 0.3% over its prediction under
    // bf16-autocast (the stages' weight casts, made again as each stage recomputes).
    return "its step runs under autocast (" + std::string(precision_name(trace.precision)) +
           "), and the relay's device peak is not predicted for the weight casts its stages make";
  }
  for (const auto& layer : trace.layers) {
    if (layer.kind.find("batchnorm") != std::string::npos) {
      return "its BatchNorm layer " + layer.name + " would update its running statistics twice (forward and recompute)";
    }
  }
  return "";
}

}  // namespace headroom::core
