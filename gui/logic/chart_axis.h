#pragma once
// Axis choices for the charts, as plain numbers so they are tested without drawing: round ticks
// with as many decimals as they need, and how far up the memory axis reaches.
#include <cstdint>
#include <string>
#include <vector>

namespace headroom::gui {

// Ticks from 0 to `max` every `interval` (1, 2 or 5 × 10^k), labelled with `decimals` decimals so
// that no two ticks read the same ("0, 0.5, 1, 1.5", never "0, 1, 1, 2").
struct NiceTicks {
  double max = 1;
  double interval = 1;
  int decimals = 0;
};
// About `target` intervals from 0 to at least `value`.
NiceTicks nice_ticks(double value, int target = 5);
std::vector<std::string> tick_labels(const NiceTicks& ticks);

// The memory chart's vertical reach. A budget far above the plan's peak would squash the plan into
// the bottom of the chart, so past `kBudgetOffScaleRatio` × the peak the axis follows the peak and
// the budget is marked as off the scale instead of drawn.
inline constexpr double kBudgetOffScaleRatio = 2.0;
struct MemoryScale {
  std::int64_t top_bytes = 0;  // the highest value the axis must show
  bool budget_off_scale = false;
};
MemoryScale memory_scale(std::int64_t peak_bytes, std::int64_t budget_bytes);

}  // namespace headroom::gui
