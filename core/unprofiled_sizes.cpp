#include "core/unprofiled_sizes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/units.h"

namespace headroom::core {

namespace {

// "10 and 11" to read.
std::string named(const std::vector<std::int64_t>& sizes) {
  std::string text;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    text += (k == 0 ? "" : k + 1 == sizes.size() ? " and " : ", ") + std::to_string(sizes[k]);
  }
  return text;
}

// What measures the sizes: profile them into the plan's trace and plan again.
std::string profile_them_in(const std::vector<std::int64_t>& sizes, const Plan& plan) {
  std::string flag;  // "10,11"
  for (std::size_t k = 0; k < sizes.size(); ++k) flag += (k ? "," : "") + std::to_string(sizes[k]);
  const std::string trace_file = plan.trace_path.empty() ? std::string("TRACE") : plan.trace_path;
  return "profile them into the trace (`headroom profile` with its flags and --batch-sizes " + flag + " --add-to " + trace_file +
         " -o " + trace_file + ") and plan again for measured figures";
}

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%%", 100.0 * fraction);
  return text;
}

}  // namespace

std::vector<std::int64_t> sizes_between_profiled(const std::vector<std::int64_t>& micro_batches, const Trace& trace) {
  std::vector<std::int64_t> sizes;
  if (trace.batch_sizes.empty()) return sizes;
  for (const std::int64_t b : micro_batches) {
    if (b > trace.batch_sizes.front() && b < trace.batch_sizes.back() && trace.batch_index(b) < 0 &&
        std::find(sizes.begin(), sizes.end(), b) == sizes.end()) {
      sizes.push_back(b);
    }
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

std::optional<std::string> bound_between_sizes_note(const Plan& plan, const Trace& trace, std::int64_t line_peak_bytes) {
  const std::vector<std::int64_t> sizes = sizes_between_profiled(plan.choice.micro_batches, trace);
  const auto& micro_batches = plan.choice.micro_batches;
  if (sizes.empty() || line_peak_bytes <= 0 || trace.batch_sizes.empty() ||
      *std::max_element(micro_batches.begin(), micro_batches.end()) > trace.batch_sizes.back()) {
    return std::nullopt;
  }
  const std::int64_t above = plan.predicted.peak_bytes - line_peak_bytes;
  if (static_cast<double>(above) <= 0.01 * static_cast<double>(line_peak_bytes)) return std::nullopt;
  return "micro-batches of " + named(sizes) + " were not profiled: the predicted peak is a bound there, " +
         format_bytes(above) + " (" + percent(static_cast<double>(above) / static_cast<double>(line_peak_bytes)) +
         ") above the line through the profiled sizes around them, because a kernel's scratch memory can step anywhere "
         "between two profiled sizes; " +
         profile_them_in(sizes, plan);
}

std::optional<std::string> unprofiled_sizes_warning(const Plan& plan, const Trace& trace, const Report& report) {
  if (report.status != "ok" || report.measured.peak_bytes <= 0) return std::nullopt;
  const bool over = static_cast<double>(report.predicted.peak_bytes) > 1.01 * static_cast<double>(report.measured.peak_bytes);
  const bool under = report.predicted.peak_bytes < report.measured.peak_bytes;
  if (!over && !under) return std::nullopt;
  const std::vector<std::int64_t> sizes = sizes_between_profiled(plan.choice.micro_batches, trace);
  if (sizes.empty()) return std::nullopt;
  const std::string off = percent(std::abs(static_cast<double>(report.predicted.peak_bytes) /
                                           static_cast<double>(report.measured.peak_bytes) - 1.0));
  // Under: a layer's scratch memory that steps between the profiled sizes where the line through
  // them cannot see it (clip's bfloat16 matrix products' backward, in blocks of 4 samples: the same
  // bytes at 5 as at 8, the line from 4 to 8 a quarter of the step at 5).
  const std::string why = over ? " over the measured peak: micro-batches of " + named(sizes) +
                                     " were not profiled, and between the profiled sizes their memory is bounded from above"
                               : " under the measured peak: micro-batches of " + named(sizes) +
                                     " were not profiled, and a layer's scratch memory can step between the profiled sizes "
                                     "where the line through them does not see it";
  return "the prediction was " + off + why + "; " + profile_them_in(sizes, plan);
}

}  // namespace headroom::core
