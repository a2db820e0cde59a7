#include "gui/logic/chart_axis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace headroom::gui {

NiceTicks nice_ticks(double value, int target) {
  NiceTicks ticks;
  if (!(value > 0) || !std::isfinite(value)) return ticks;
  const double raw = value / std::max(target, 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double fraction = raw / magnitude;
  const double step = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10;
  ticks.interval = step * magnitude;
  // A hair of tolerance so 3.0000000001 intervals do not add a fourth.
  ticks.max = std::ceil(value / ticks.interval - 1e-9) * ticks.interval;
  ticks.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(ticks.interval) + 1e-9)));
  return ticks;
}

std::vector<std::string> tick_labels(const NiceTicks& ticks) {
  std::vector<std::string> labels;
  const auto count = static_cast<int>(std::lround(ticks.max / ticks.interval));
  for (int i = 0; i <= count; ++i) {
    char text[48];
    std::snprintf(text, sizeof text, "%.*f", ticks.decimals, i * ticks.interval);
    labels.emplace_back(text);
  }
  return labels;
}

MemoryScale memory_scale(std::int64_t peak_bytes, std::int64_t budget_bytes) {
  if (peak_bytes <= 0) return {std::max<std::int64_t>(budget_bytes, 1), false};
  if (static_cast<double>(budget_bytes) > kBudgetOffScaleRatio * static_cast<double>(peak_bytes)) {
    return {peak_bytes, true};
  }
  return {std::max(peak_bytes, budget_bytes), false};
}

}  // namespace headroom::gui
