#pragma once
// What L2L can run: the strategy table's test for L2L (core/strategies.h), the planner's
// search and its check of a plan's choice, and the CLI's refusal of --strategies l2l read it.
#include <string>

#include "core/trace.h"

namespace headroom::core {

// Why L2L cannot run the traced model, in one phrase ("" when it can): a contrastive loss
// couples every micro-batch (L2L computes each one's loss alone), BatchNorm would update its
// running statistics twice (forward and recompute), and a TorchScript module's layers are not the
// zoo's that L2L runs one stage at a time.
std::string l2l_refusal(const Trace& trace);
inline bool l2l_can_run(const Trace& trace) { return l2l_refusal(trace).empty(); }

}  // namespace headroom::core
