#include "core/link_json.h"

namespace headroom::core {

namespace {

CollectiveLink::Line read_line(const JsonNode& node) {
  CollectiveLink::Line line;
  line.bytes_per_second = node.at("bytes_per_second").as_double();
  if (!(line.bytes_per_second >= 1 && line.bytes_per_second <= 1e14)) {
    node.at("bytes_per_second").fail("expected from 1 to 1e14 bytes per second");
  }
  line.latency_ns = node.at("latency_ns").as_int_in(0, 10'000'000'000);
  return line;
}

}  // namespace

nlohmann::json to_json(const CollectiveLink& link) {
  nlohmann::json out = {{"bytes_per_second", link.bytes_per_second}, {"latency_ns", link.latency_ns}, {"source", link.source}};
  for (const auto& [key, line] : {std::pair{"broadcast", &link.broadcast}, std::pair{"reduce", &link.reduce},
                                  std::pair{"gather", &link.gather}}) {
    if (line->known()) out[key] = {{"bytes_per_second", line->bytes_per_second}, {"latency_ns", line->latency_ns}};
  }
  if (link.beside_compute > 0) out["beside_compute"] = link.beside_compute;
  return out;
}

CollectiveLink read_link(const JsonNode& link) {
  const CollectiveLink::Line main = read_line(link);
  CollectiveLink l;
  l.bytes_per_second = main.bytes_per_second;
  l.latency_ns = main.latency_ns;
  l.source = link.at("source").as_string();
  if (link.has("broadcast")) l.broadcast = read_line(link.at("broadcast"));
  if (link.has("reduce")) l.reduce = read_line(link.at("reduce"));
  if (link.has("gather")) l.gather = read_line(link.at("gather"));
  if (link.has("beside_compute")) {
    l.beside_compute = link.at("beside_compute").as_double();
    if (!(l.beside_compute >= 0 && l.beside_compute <= CollectiveLink::kMostBesideCompute)) {
      link.at("beside_compute").fail("expected a share from 0 to 2 of a collective's time");
    }
  }
  return l;
}

}  // namespace headroom::core
