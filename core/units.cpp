#include "core/units.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/errors.h"

namespace headroom::core {

std::int64_t parse_bytes(std::string_view text) {
  auto fail = [&](const char* why) {
    throw InputError("invalid byte size '" + std::string(text) + "': " + why +
                     " (examples: 512MiB, 1.5GiB, 1048576)");
  };
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i < text.size() && text[i] == '-') fail("a size cannot be negative");
  if (i == text.size()) fail("empty");
  std::size_t number_start = i;
  bool seen_digit = false, seen_dot = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    if (text[i] == '.') {
      if (seen_dot) fail("two decimal points");
      seen_dot = true;
    } else {
      seen_digit = true;
    }
    ++i;
  }
  if (!seen_digit) fail("no number");
  const double value = std::stod(std::string(text.substr(number_start, i - number_start)));
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit(text.substr(i));
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();

  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  else fail("unknown unit (use B, KiB, MiB, GiB or TiB)");

  const double bytes = value * scale;
  if (bytes > static_cast<double>(std::numeric_limits<std::int64_t>::max())) fail("too large");
  if (scale == 1 && seen_dot) fail("plain bytes must be a whole number");
  return static_cast<std::int64_t>(std::llround(bytes));
}

std::string format_bytes(std::int64_t bytes) {
  static constexpr std::array<const char*, 5> kUnits{"B", "KiB", "MiB", "GiB", "TiB"};
  const bool negative = bytes < 0;
  double value = std::fabs(static_cast<double>(bytes));
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[48];
  const char* sign = negative ? "-" : "";
  if (unit == 0) std::snprintf(buffer, sizeof buffer, "%s%.0f B", sign, value);
  else if (value < 10) std::snprintf(buffer, sizeof buffer, "%s%.2f %s", sign, value, kUnits[unit]);
  else if (value < 100) std::snprintf(buffer, sizeof buffer, "%s%.1f %s", sign, value, kUnits[unit]);
  else std::snprintf(buffer, sizeof buffer, "%s%.0f %s", sign, value, kUnits[unit]);
  return buffer;
}

std::string format_bytes_at_least(std::int64_t bytes) {
  std::int64_t shown = bytes;
  std::string text = format_bytes(shown);
  // Three significant digits: a step of a twentieth of a percent reaches the next shown value in
  // at most twenty steps.
  while (bytes > 0 && parse_bytes(text) < bytes) {
    shown += std::max<std::int64_t>(1, shown / 2000);
    text = format_bytes(shown);
  }
  return text;
}

std::string format_duration_ns(std::int64_t ns) {
  char buffer[48];
  const double v = static_cast<double>(ns);
  if (ns < 1000) std::snprintf(buffer, sizeof buffer, "%lld ns", static_cast<long long>(ns));
  else if (ns < 1'000'000) std::snprintf(buffer, sizeof buffer, "%.3g us", v / 1e3);
  else if (ns < 1'000'000'000) std::snprintf(buffer, sizeof buffer, "%.3g ms", v / 1e6);
  else std::snprintf(buffer, sizeof buffer, "%.3g s", v / 1e9);
  return buffer;
}

}  // namespace headroom::core
