#include "core/collective.h"

#include <cctype>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "core/errors.h"
#include "core/saturating.h"

namespace headroom::core {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A positive finite number at the front of `s`; the rest is left in `s`.
double leading_number(std::string_view& s, std::string_view whole) {
  std::size_t used = 0;
  while (used < s.size() && (std::isdigit(static_cast<unsigned char>(s[used])) || s[used] == '.' || s[used] == 'e' ||
                             s[used] == 'E' || ((s[used] == '+' || s[used] == '-') && used > 0 && (s[used - 1] == 'e' || s[used - 1] == 'E')))) {
    ++used;
  }
  const std::string number(s.substr(0, used));
  char* end = nullptr;
  const double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(value) || value < 0) {
    throw InputError("invalid link '" + std::string(whole) + "': expected BANDWIDTH,LATENCY such as 25GB/s,5us");
  }
  s = trim(s.substr(used));
  return value;
}

}  // namespace

CollectiveLink parse_link(std::string_view text) {
  const std::string_view whole = text;
  const auto comma = text.find(',');
  const auto fail = [&](const std::string& why) {
    throw InputError("invalid link '" + std::string(whole) + "': " + why + " (expected BANDWIDTH,LATENCY such as 25GB/s,5us)");
  };
  if (comma == std::string_view::npos) fail("no latency");
  std::string_view bw = trim(text.substr(0, comma)), lat = trim(text.substr(comma + 1));
  double bandwidth = leading_number(bw, whole);
  static const std::pair<std::string_view, double> kRates[] = {
      {"B/s", 1},         {"kB/s", 1e3},           {"KB/s", 1e3},           {"MB/s", 1e6},     {"GB/s", 1e9},
      {"KiB/s", 1024.0},  {"MiB/s", 1048576.0},    {"GiB/s", 1073741824.0}, {"TB/s", 1e12},
  };
  bool unit_known = false;
  for (const auto& [unit, factor] : kRates) {
    if (bw == unit) {
      bandwidth *= factor;
      unit_known = true;
    }
  }
  if (!unit_known) fail("unknown bandwidth unit '" + std::string(bw) + "' (B/s, kB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s)");
  // 1 B/s to 100 TB/s: anything outside is a typing error, and keeps times within 64 bits.
  if (bandwidth < 1 || bandwidth > 1e14) fail("bandwidth must be from 1 B/s to 100 TB/s");
  double latency = leading_number(lat, whole);
  static const std::pair<std::string_view, double> kTimes[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
  unit_known = false;
  for (const auto& [unit, factor] : kTimes) {
    if (lat == unit) {
      latency *= factor;
      unit_known = true;
    }
  }
  if (!unit_known) fail("unknown latency unit '" + std::string(lat) + "' (ns, us, ms, s)");
  if (latency > 1e10) fail("latency must be at most 10 s");
  CollectiveLink link;
  link.bytes_per_second = bandwidth;
  link.latency_ns = std::llround(latency);
  link.source = "given";
  return link;
}

std::string format_link(const CollectiveLink& link) {
  char text[96];
  const double l = static_cast<double>(link.latency_ns);
  const char* unit = l >= 1e6 ? "ms" : l >= 1e3 ? "us" : "ns";
  const double shown = l >= 1e6 ? l / 1e6 : l >= 1e3 ? l / 1e3 : l;
  std::snprintf(text, sizeof text, "%.3g GB/s, %.3g %s", link.bytes_per_second / 1e9, shown, unit);
  return text;
}

std::int64_t transfer_ns(std::int64_t bytes, double bytes_per_second, std::int64_t latency_ns, std::int64_t messages) {
  return saturating_add(saturating_mul(messages, latency_ns),
                        std::llround(std::min(static_cast<double>(bytes) / bytes_per_second * 1e9, 9e18)));
}

std::int64_t ring_allreduce_ns(std::int64_t bytes, int workers, const CollectiveLink& link) {
  if (workers <= 1 || bytes <= 0) return 0;
  const double steps = 2.0 * (workers - 1);
  const double per_step = static_cast<double>(bytes) / workers / link.bytes_per_second * 1e9;
  return std::llround(steps * (static_cast<double>(link.latency_ns) + per_step));
}

std::vector<GradientBucket> gradient_buckets(const std::vector<std::int64_t>& layer_bytes, std::int64_t cap_bytes) {
  std::vector<GradientBucket> buckets;
  bool open = false;
  for (std::size_t r = layer_bytes.size(); r-- > 0;) {
    if (layer_bytes[r] <= 0) continue;
    const int layer = static_cast<int>(r);
    if (!open) {
      buckets.push_back({layer, layer, 0});
      open = true;
    }
    buckets.back().first_layer = layer;
    buckets.back().bytes += layer_bytes[r];
    if (buckets.back().bytes >= cap_bytes) open = false;
  }
  return buckets;
}

bool widens_gradients_for_allreduce(Precision precision, bool cuda) { return precision == Precision::Bf16 && !cuda; }

std::int64_t allreduce_gradient_bytes(std::int64_t gradient_bytes, Precision precision, bool cuda) {
  return widens_gradients_for_allreduce(precision, cuda) ? 2 * gradient_bytes : gradient_bytes;
}

}  // namespace headroom::core
