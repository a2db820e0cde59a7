#include "core/step_figures.h"

namespace headroom::core {

nlohmann::json to_json(const StepFigures& figures) {
  return {{"peak_bytes", figures.peak_bytes},
          {"step_seconds", figures.step_seconds},
          {"samples_per_second", figures.samples_per_second}};
}

StepFigures read_step_figures(const JsonNode& node) {
  StepFigures f;
  // Bounded as a trace's measurements are: a byte count within 2^50, times and rates finite.
  f.peak_bytes = node.at("peak_bytes").as_int_in(0, std::int64_t{1} << 50);
  f.step_seconds = node.at("step_seconds").as_double();
  f.samples_per_second = node.at("samples_per_second").as_double();
  constexpr double kMost = 1e12;
  if (!(f.step_seconds >= 0 && f.step_seconds <= kMost)) node.at("step_seconds").fail("expected a number from 0 to 1e12");
  if (!(f.samples_per_second >= 0 && f.samples_per_second <= kMost)) {
    node.at("samples_per_second").fail("expected a number from 0 to 1e12");
  }
  return f;
}

}  // namespace headroom::core
