#pragma once
// The three numbers a training step is judged by, whether predicted (a plan) or measured (a report).
#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/json_reader.h"

namespace headroom::core {

struct StepFigures {
  std::int64_t peak_bytes = 0;
  double step_seconds = 0;
  double samples_per_second = 0;
  bool operator==(const StepFigures&) const = default;
};

nlohmann::json to_json(const StepFigures& figures);
// Throws InputError naming the JSON path of a missing or negative field.
StepFigures read_step_figures(const JsonNode& node);

}  // namespace headroom::core
