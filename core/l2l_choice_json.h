#pragma once
// L2L's choice as a plan file holds it: the plan's "l2l" field, written and read here so that the
// plan's own reader and writer (core/plan.cpp) pass it along without knowing what it holds.
#include <optional>

#include <nlohmann/json.hpp>

#include "core/json_reader.h"
#include "core/step_choice.h"

namespace headroom::core {

// Adds "l2l" to a plan's document where the choice uses L2L; nothing otherwise.
void write_l2l_choice(nlohmann::json& document, const std::optional<L2LChoice>& choice);
// The L2L choice a plan's document holds, if any; throws InputError (through `root`) for a
// malformed one.
std::optional<L2LChoice> read_l2l_choice(const JsonNode& root);

}  // namespace headroom::core
