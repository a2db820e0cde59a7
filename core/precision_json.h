#pragma once
// Reading a "precision" field of the trace, plan and report documents (core/precision.h).
#include "core/json_reader.h"
#include "core/precision.h"

namespace headroom::core {

// The precision a node names; fails at the node's path for a name that is not one.
Precision read_precision(const JsonNode& node);

}  // namespace headroom::core
