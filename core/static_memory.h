#pragma once
// What a step holds from its first micro-batch to its last, by kind, per parameter: the figure
// users compare estimators by ("Adam under AMP: 16 bytes per parameter?"). Taken from what the
// trace measured (parameters as the step keeps them, the optimizer's state after a step), so it
// holds for the trace's precision and optimizer.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_reader.h"
#include "core/precision.h"

namespace headroom::core {

struct Trace;

struct StaticMemory {
  std::string optimizer;  // core/optimizer_spec.h's text: "sgd", "adam(amsgrad)", ...
  std::int64_t parameter_elements = 0;
  std::int64_t parameter_bytes = 0;        // as the step keeps them: bfloat16 under bf16
  // Of the parameters, those that do not train (frozen): no gradient, no optimizer state.
  std::int64_t frozen_parameter_elements = 0;
  std::int64_t frozen_parameter_bytes = 0;
  std::int64_t gradient_bytes = 0;         // the trainable parameters' dtype: gradients accumulate in place
  std::int64_t optimizer_state_bytes = 0;  // everything the optimizer keeps, master weights included
  std::int64_t master_weight_bytes = 0;    // under bf16: the float32 copies the optimizer updates
  bool operator==(const StaticMemory&) const = default;

  std::int64_t total_bytes() const { return parameter_bytes + gradient_bytes + optimizer_state_bytes; }
  std::int64_t trainable_parameter_elements() const { return parameter_elements - frozen_parameter_elements; }
  // 0 for a model without parameters.
  double bytes_per_parameter(std::int64_t bytes) const;
};

StaticMemory static_memory(const Trace& trace);

// "adam under bf16-autocast: 16 B/param (parameters 4, gradients 4, optimizer state 8) + a
// bfloat16 copy of each layer's weights while its forward runs (2 B/param of that layer)". With
// frozen parameters the trainable and the frozen share each get their bytes per parameter.
std::string describe_static_memory(const StaticMemory& memory, Precision precision);

nlohmann::json to_json(const StaticMemory& memory);
// Throws InputError naming the JSON path of a missing, negative or inconsistent field.
StaticMemory read_static_memory(const JsonNode& node);

}  // namespace headroom::core
