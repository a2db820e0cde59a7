#include "core/static_memory.h"

#include <cmath>
#include <sstream>

#include "core/trace.h"

namespace headroom::core {

namespace {

std::string per_parameter(double bytes) {
  std::ostringstream out;
  // Whole bytes where they are (they are, for the zoo's optimizers); else one decimal.
  if (std::abs(bytes - std::round(bytes)) < 0.05) {
    out << std::llround(bytes);
  } else {
    out.setf(std::ios::fixed);
    out.precision(1);
    out << bytes;
  }
  return out.str();
}

}  // namespace

double StaticMemory::bytes_per_parameter(std::int64_t bytes) const {
  return parameter_elements > 0 ? static_cast<double>(bytes) / static_cast<double>(parameter_elements) : 0.0;
}

StaticMemory static_memory(const Trace& trace) {
  StaticMemory m;
  m.optimizer = trace.optimizer.name;
  m.parameter_bytes = trace.param_bytes();
  m.parameter_elements = m.parameter_bytes / parameter_element_bytes(trace.precision);
  m.gradient_bytes = m.parameter_bytes;
  m.optimizer_state_bytes = trace.optimizer.state_bytes;
  if (trace.precision == Precision::Bf16) m.master_weight_bytes = 4 * m.parameter_elements;
  return m;
}

std::string describe_static_memory(const StaticMemory& memory, Precision precision) {
  const auto per = [&](std::int64_t bytes) { return per_parameter(memory.bytes_per_parameter(bytes)); };
  std::string out = memory.optimizer + " under " + std::string(precision_name(precision)) + ": " + per(memory.total_bytes()) +
                    " B/param (parameters " + per(memory.parameter_bytes) + ", gradients " + per(memory.gradient_bytes);
  if (memory.master_weight_bytes > 0) {
    out += ", float32 master weights " + per(memory.master_weight_bytes) + ", optimizer state " +
           per(memory.optimizer_state_bytes - memory.master_weight_bytes);
  } else {
    out += ", optimizer state " + per(memory.optimizer_state_bytes);
  }
  out += ")";
  // The cast cache: autocast's copy of a weight lives while the layer's forward runs (the region
  // is the layer's), and on with its activations where an op saves it for backward.
  if (is_autocast(precision)) {
    out += " + a " + std::string(precision == Precision::Fp16Autocast ? "float16" : "bfloat16") +
           " copy of each layer's weights while its forward runs (2 B/param of that layer, counted in its activations)";
  }
  return out;
}

nlohmann::json to_json(const StaticMemory& memory) {
  return {{"optimizer", memory.optimizer},
          {"parameter_elements", memory.parameter_elements},
          {"parameter_bytes", memory.parameter_bytes},
          {"gradient_bytes", memory.gradient_bytes},
          {"optimizer_state_bytes", memory.optimizer_state_bytes},
          {"master_weight_bytes", memory.master_weight_bytes}};
}

StaticMemory read_static_memory(const JsonNode& node) {
  constexpr std::int64_t kMost = std::int64_t{1} << 50;  // as a trace's byte counts
  StaticMemory m;
  m.optimizer = node.at("optimizer").as_string();
  if (m.optimizer != "sgd" && m.optimizer != "adam") node.at("optimizer").fail("expected sgd or adam, got '" + m.optimizer + "'");
  m.parameter_elements = node.at("parameter_elements").as_int_in(0, kMost);
  m.parameter_bytes = node.at("parameter_bytes").as_int_in(0, kMost);
  m.gradient_bytes = node.at("gradient_bytes").as_int_in(0, kMost);
  m.optimizer_state_bytes = node.at("optimizer_state_bytes").as_int_in(0, kMost);
  m.master_weight_bytes = node.at("master_weight_bytes").as_int_in(0, m.optimizer_state_bytes);
  return m;
}

}  // namespace headroom::core
