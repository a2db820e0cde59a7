#include "core/unprofiled_sizes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace headroom::core {

std::optional<std::string> unprofiled_sizes_warning(const Plan& plan, const Trace& trace, const Report& report) {
  if (report.status != "ok" || report.measured.peak_bytes <= 0) return std::nullopt;
  const bool over = static_cast<double>(report.predicted.peak_bytes) > 1.01 * static_cast<double>(report.measured.peak_bytes);
  const bool under = report.predicted.peak_bytes < report.measured.peak_bytes;
  if (!over && !under) return std::nullopt;
  std::vector<std::int64_t> unprofiled;
  for (const std::int64_t b : plan.choice.micro_batches) {
    if (b < trace.batch_sizes.back() && trace.batch_index(b) < 0 &&
        std::find(unprofiled.begin(), unprofiled.end(), b) == unprofiled.end()) {
      unprofiled.push_back(b);
    }
  }
  if (unprofiled.empty()) return std::nullopt;
  std::sort(unprofiled.begin(), unprofiled.end());
  std::string sizes, named;  // "10,11" for the flag, "10 and 11" to read
  for (std::size_t k = 0; k < unprofiled.size(); ++k) {
    sizes += (k ? "," : "") + std::to_string(unprofiled[k]);
    named += (k == 0 ? "" : k + 1 == unprofiled.size() ? " and " : ", ") + std::to_string(unprofiled[k]);
  }
  char off[32];
  std::snprintf(off, sizeof off, "%.2f%%", 100.0 * std::abs(static_cast<double>(report.predicted.peak_bytes) /
                                                                static_cast<double>(report.measured.peak_bytes) - 1.0));
  const std::string trace_file = plan.trace_path.empty() ? std::string("TRACE") : plan.trace_path;
  // Under: a layer's scratch memory that steps between the profiled sizes where the line through
  // them cannot see it (clip's bfloat16 matrix products' backward, in blocks of 4 samples: the same
  // bytes at 5 as at 8, the line from 4 to 8 a quarter of the step at 5).
  const std::string why = over ? " over the measured peak: micro-batches of " + named +
                                     " were not profiled, and between the profiled sizes their memory is bounded from above"
                               : " under the measured peak: micro-batches of " + named +
                                     " were not profiled, and a layer's scratch memory can step between the profiled sizes "
                                     "where the line through them does not see it";
  return "the prediction was " + std::string(off) + why +
         "; profile them into the trace (`headroom profile` with its flags and --batch-sizes " + sizes + " --add-to " +
         trace_file + " -o " + trace_file + ") and plan again for measured figures";
}

}  // namespace headroom::core
