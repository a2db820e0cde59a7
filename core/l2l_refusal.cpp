#include "core/l2l_refusal.h"

namespace headroom::core {

std::string l2l_refusal(const Trace& trace) {
  if (trace.contrastive_loss) {
    return "its contrastive loss couples every micro-batch, and L2L computes each micro-batch's loss alone";
  }
  if (trace.model.is_users_module()) return "it is a module of your own, and L2L runs only the zoo's models stage by stage";
  if (trace.has_frozen_parameters()) {
    return "some of its parameters are frozen, and L2L relays and steps every stage's parameters as trained ones";
  }
  if (trace.precision == Precision::Fp16Autocast) {
    return "its step runs under fp16-autocast, whose loss scaling (the scale in backward's seeds, a step skipped on "
           "inf or NaN across every stage's gradients) L2L does not run";
  }
  if (is_autocast(trace.precision) && !trace.measures_inputs_held()) {
    // Under autocast a stage's first matrix product peaks after its saved input is freed in the
    // profiled step, while L2L's stash still holds it (docs/design.md, "L2L").
    return "its step runs under autocast (" + std::string(precision_name(trace.precision)) +
           ") and the trace is from before backward peaks were measured with their inputs held, as L2L holds "
           "them; profile the model again";
  }
  for (const auto& layer : trace.layers) {
    if (layer.kind.find("batchnorm") != std::string::npos) {
      return "its BatchNorm layer " + layer.name + " would update its running statistics twice (forward and recompute)";
    }
  }
  return "";
}

}  // namespace headroom::core
