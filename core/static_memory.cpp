#include "core/static_memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/optimizer_spec.h"
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

// 11,689,512: a parameter count as people read one.
std::string count_text(std::int64_t count) {
  std::string digits = std::to_string(count), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

double StaticMemory::bytes_per_parameter(std::int64_t bytes) const {
  return parameter_elements > 0 ? static_cast<double>(bytes) / static_cast<double>(parameter_elements) : 0.0;
}

StaticMemory static_memory(const Trace& trace) {
  StaticMemory m;
  m.optimizer = trace.optimizer.name;
  const int element_bytes = parameter_element_bytes(trace.precision);
  m.parameter_bytes = trace.param_bytes();
  m.parameter_elements = m.parameter_bytes / element_bytes;
  m.frozen_parameter_bytes = trace.frozen_param_bytes();
  m.frozen_parameter_elements = m.frozen_parameter_bytes / element_bytes;
  m.gradient_bytes = m.parameter_bytes - m.frozen_parameter_bytes;
  m.optimizer_state_bytes = trace.optimizer.state_bytes;
  if (trace.precision == Precision::Bf16) m.master_weight_bytes = 4 * m.trainable_parameter_elements();
  return m;
}

std::string describe_static_memory(const StaticMemory& memory, Precision precision) {
  const bool frozen = memory.frozen_parameter_elements > 0;
  // Per trainable parameter where some are frozen: what training one more parameter costs.
  const double elements = static_cast<double>(frozen ? memory.trainable_parameter_elements() : memory.parameter_elements);
  const auto per = [&](std::int64_t bytes) {
    return per_parameter(elements > 0 ? static_cast<double>(bytes) / elements : 0.0);
  };
  std::string out = memory.optimizer + " under " + std::string(precision_name(precision)) + ": ";
  if (frozen) {
    const double share = 100.0 * static_cast<double>(memory.trainable_parameter_elements()) /
                         static_cast<double>(std::max<std::int64_t>(memory.parameter_elements, 1));
    char percent[32];
    std::snprintf(percent, sizeof percent, share < 0.1 ? "%.3f" : "%.1f", share);
    out += count_text(memory.parameter_elements) + " parameters, " + count_text(memory.trainable_parameter_elements()) +
           " trainable (" + percent + "%): trainable " +
           per(memory.parameter_bytes - memory.frozen_parameter_bytes + memory.gradient_bytes + memory.optimizer_state_bytes) +
           " B/param (parameters " + per(memory.parameter_bytes - memory.frozen_parameter_bytes) + ", gradients " +
           per(memory.gradient_bytes);
  } else {
    out += per(memory.total_bytes()) + " B/param (parameters " + per(memory.parameter_bytes) + ", gradients " +
           per(memory.gradient_bytes);
  }
  if (memory.master_weight_bytes > 0) {
    out += ", float32 master weights " + per(memory.master_weight_bytes) + ", optimizer state " +
           per(memory.optimizer_state_bytes - memory.master_weight_bytes);
  } else {
    out += ", optimizer state " + per(memory.optimizer_state_bytes);
  }
  out += ")";
  if (frozen) {
    out += ", frozen " + per_parameter(static_cast<double>(memory.frozen_parameter_bytes) /
                                       static_cast<double>(memory.frozen_parameter_elements)) +
           " B/param (parameters only)";
  }
  // The cast cache: autocast's copy of a weight lives while the layer's forward runs (the region
  // is the layer's), and on with its activations where an op saves it for backward.
  if (is_autocast(precision)) {
    out += " + a " + std::string(precision == Precision::Fp16Autocast ? "float16" : "bfloat16") +
           " copy of each layer's weights while its forward runs (2 B/param of that layer, counted in its activations)";
  }
  return out;
}

nlohmann::json to_json(const StaticMemory& memory) {
  nlohmann::json out = {{"optimizer", memory.optimizer},
          {"parameter_elements", memory.parameter_elements},
          {"parameter_bytes", memory.parameter_bytes},
          {"gradient_bytes", memory.gradient_bytes},
          {"optimizer_state_bytes", memory.optimizer_state_bytes},
          {"master_weight_bytes", memory.master_weight_bytes}};
  if (memory.frozen_parameter_elements > 0) {
    out["frozen_parameter_elements"] = memory.frozen_parameter_elements;
    out["frozen_parameter_bytes"] = memory.frozen_parameter_bytes;
  }
  return out;
}

StaticMemory read_static_memory(const JsonNode& node) {
  constexpr std::int64_t kMost = std::int64_t{1} << 50;  // as a trace's byte counts
  StaticMemory m;
  m.optimizer = node.at("optimizer").as_string();
  const auto spec = optimizer_spec_of(m.optimizer);
  if (!spec) node.at("optimizer").fail("unknown optimizer '" + m.optimizer + "' (known: " + kOptimizerForms + ")");
  m.optimizer = spec->text();
  m.parameter_elements = node.at("parameter_elements").as_int_in(0, kMost);
  m.parameter_bytes = node.at("parameter_bytes").as_int_in(0, kMost);
  m.gradient_bytes = node.at("gradient_bytes").as_int_in(0, kMost);
  m.optimizer_state_bytes = node.at("optimizer_state_bytes").as_int_in(0, kMost);
  m.master_weight_bytes = node.at("master_weight_bytes").as_int_in(0, m.optimizer_state_bytes);
  if (node.has("frozen_parameter_elements")) {
    m.frozen_parameter_elements = node.at("frozen_parameter_elements").as_int_in(0, m.parameter_elements);
    m.frozen_parameter_bytes = node.at("frozen_parameter_bytes").as_int_in(0, m.parameter_bytes);
  }
  return m;
}

}  // namespace headroom::core
