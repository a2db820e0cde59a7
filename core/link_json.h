#pragma once
// The workers' link as a trace and a plan write it (core/collective.h).
#include <nlohmann/json.hpp>

#include "core/collective.h"
#include "core/json_reader.h"

namespace headroom::core {

nlohmann::json to_json(const CollectiveLink& link);
// Throws InputError naming the JSON path of a missing or out-of-range field.
CollectiveLink read_link(const JsonNode& link);

}  // namespace headroom::core
