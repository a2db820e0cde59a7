#pragma once
// Choosing among the precisions one trace measured (`profile --precision fp32,bf16-autocast`): the
// chosen one's figures are those plans use; the others stay with it for side-by-side comparison.
#include <string_view>

#include "core/precision.h"
#include "core/trace.h"

namespace headroom::core {

// The trace with `precision` first and the rest (its own first among them) in other_precisions, in
// their order. Throws InputError "<what> measured the step in fp32, bf16, not bf16-autocast (...)"
// where it was not measured.
Trace with_precision_first(const Trace& trace, Precision precision, std::string_view what);

}  // namespace headroom::core
