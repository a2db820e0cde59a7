#include "core/step_figures.h"

namespace headroom::core {

nlohmann::json to_json(const StepFigures& figures) {
  return {{"peak_bytes", figures.peak_bytes},
          {"step_seconds", figures.step_seconds},
          {"samples_per_second", figures.samples_per_second}};
}

StepFigures read_step_figures(const JsonNode& node) {
  StepFigures f;
  f.peak_bytes = node.at("peak_bytes").as_non_negative_int();
  f.step_seconds = node.at("step_seconds").as_double();
  f.samples_per_second = node.at("samples_per_second").as_double();
  if (f.step_seconds < 0) node.at("step_seconds").fail("expected a non-negative number");
  if (f.samples_per_second < 0) node.at("samples_per_second").fail("expected a non-negative number");
  return f;
}

}  // namespace headroom::core
