#include "core/contrastive_profile.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/json_reader.h"
#include "core/trace.h"

namespace headroom::core {

namespace {

constexpr std::pair<ContrastiveMode, std::string_view> kModes[] = {
    {ContrastiveMode::Standard, "standard"}, {ContrastiveMode::Tiled, "tiled"}, {ContrastiveMode::Surrogate, "surrogate"}};

}  // namespace

std::string_view contrastive_mode_name(ContrastiveMode mode) {
  for (const auto& [m, name] : kModes) {
    if (m == mode) return name;
  }
  return "?";
}

nlohmann::json to_json(const ContrastiveProfile& profile) {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : profile.samples) {
    nlohmann::json out = {{"mode", contrastive_mode_name(s.mode)},
                          {"batch", s.batch},
                          {"fwd_ns", s.fwd_ns},
                          {"bwd_ns", s.bwd_ns},
                          {"fwd_transient_bytes", s.fwd_transient_bytes},
                          {"fwd_retained_bytes", s.fwd_retained_bytes},
                          {"bwd_transient_bytes", s.bwd_transient_bytes},
                          {"bwd_retained_bytes", s.bwd_retained_bytes}};
    if (s.mode == ContrastiveMode::Tiled) {
      out["tile_rows"] = s.tile_rows;
      out["tile_cols"] = s.tile_cols;
    }
    samples.push_back(std::move(out));
  }
  return {{"layer", profile.layer}, {"dim", profile.dim}, {"samples", std::move(samples)}};
}

ContrastiveProfile read_contrastive_profile(const JsonNode& node, std::size_t layers) {
  ContrastiveProfile profile;
  profile.layer = static_cast<int>(node.at("layer").as_int_in(0, static_cast<std::int64_t>(layers) - 1));
  profile.dim = node.at("dim").as_int_in(1, 1 << 20);
  std::map<std::pair<std::int64_t, std::int64_t>, int> tiled_batches;  // per tile
  int standard = 0, surrogate = 0;
  for (const auto& s : node.at("samples").elements()) {
    ContrastiveSample sample;
    const std::string mode = s.at("mode").as_string();
    const auto* known = std::find_if(std::begin(kModes), std::end(kModes), [&](const auto& m) { return m.second == mode; });
    if (known == std::end(kModes)) s.at("mode").fail("expected standard, tiled or surrogate, got '" + mode + "'");
    sample.mode = known->first;
    sample.batch = s.at("batch").as_int_in(1, kMaxTraceBatch);
    sample.fwd_ns = s.at("fwd_ns").as_int_in(0, kMaxTraceNs);
    sample.bwd_ns = s.at("bwd_ns").as_int_in(0, kMaxTraceNs);
    sample.fwd_transient_bytes = s.at("fwd_transient_bytes").as_int_in(0, kMaxTraceBytes);
    sample.fwd_retained_bytes = s.at("fwd_retained_bytes").as_int_in(-kMaxTraceBytes, kMaxTraceBytes);
    sample.bwd_transient_bytes = s.at("bwd_transient_bytes").as_int_in(0, kMaxTraceBytes);
    sample.bwd_retained_bytes = s.at("bwd_retained_bytes").as_int_in(-kMaxTraceBytes, kMaxTraceBytes);
    if (sample.mode == ContrastiveMode::Tiled) {
      sample.tile_rows = s.at("tile_rows").as_int_in(1, sample.batch);
      sample.tile_cols = s.at("tile_cols").as_int_in(1, sample.batch);
      ++tiled_batches[{sample.tile_rows, sample.tile_cols}];
    } else if (s.has("tile_rows") || s.has("tile_cols")) {
      s.fail("unexpected tile_rows/tile_cols: only a tiled sample has tiles");
    }
    standard += sample.mode == ContrastiveMode::Standard;
    surrogate += sample.mode == ContrastiveMode::Surrogate;
    profile.samples.push_back(sample);
  }
  // The planner fits the standard loss's quadratic memory through three batch sizes and the others'
  // affine memory through two.
  if (standard < 3) node.at("samples").fail("expected at least three standard samples, got " + std::to_string(standard));
  if (surrogate < 2) node.at("samples").fail("expected at least two surrogate samples, got " + std::to_string(surrogate));
  for (const auto& [tiles, count] : tiled_batches) {
    if (count < 2) {
      node.at("samples").fail("expected at least two batch sizes of tile " + std::to_string(tiles.first) + "x" +
                              std::to_string(tiles.second) + ", got " + std::to_string(count));
    }
  }
  return profile;
}

}  // namespace headroom::core
