#include "core/sharding.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/errors.h"

namespace headroom::core {

std::string shard_stage_name(int stage) {
  switch (stage) {
    case 0: return "stage 0 (replicated)";
    case 1: return "stage 1 (optimizer state sharded)";
    case 2: return "stage 2 (optimizer state and gradients sharded)";
    case 3: return "stage 3 (optimizer state, gradients and parameters sharded)";
    default: throw std::logic_error("shard_stage_name: no stage " + std::to_string(stage));
  }
}

ElementRange overlap(ElementRange a, ElementRange b) {
  const std::int64_t begin = std::max(a.begin, b.begin);
  return {begin, std::max(begin, std::min(a.end, b.end))};
}

ElementRange owned_elements(std::int64_t elements, int workers, int rank) {
  if (workers < 1 || rank < 0 || rank >= workers || elements < 0) throw std::logic_error("owned_elements: bad worker or count");
  const std::int64_t each = (elements + workers - 1) / workers;
  const std::int64_t begin = std::min(elements, each * rank);
  return {begin, std::min(elements, begin + each)};
}

namespace {

std::int64_t tree_rounds(int workers) { return static_cast<std::int64_t>(std::ceil(std::log2(static_cast<double>(workers)))); }

// `messages` collectives moving `bytes` in all on a tree over `workers`: each round as the measured
// line of two workers (or one message of the link) times.
std::int64_t tree_ns(std::int64_t bytes, std::int64_t messages, int workers, const CollectiveLink& link,
                     const CollectiveLink::Line& measured) {
  if (workers <= 1 || (bytes <= 0 && messages <= 0)) return 0;
  const std::int64_t rounds = tree_rounds(workers);
  const CollectiveLink::Line line = measured.known() ? measured : CollectiveLink::Line{link.bytes_per_second, link.latency_ns};
  return transfer_ns(bytes * rounds, line.bytes_per_second, line.latency_ns, rounds * messages);
}

}  // namespace

std::int64_t broadcast_ns(std::int64_t bytes, int workers, const CollectiveLink& link) {
  if (bytes <= 0) return 0;
  return tree_ns(bytes, 1, workers, link, link.broadcast);
}

std::int64_t reduce_ns(std::int64_t bytes, std::int64_t messages, int workers, const CollectiveLink& link) {
  return tree_ns(bytes, messages, workers, link, link.reduce);
}

bool backward_reads_parameters(std::string_view kind) { return kind != "embedding"; }

std::string_view gather_unit_name(GatherUnit unit) { return unit == GatherUnit::Block ? "block" : "layer"; }

GatherUnit parse_gather_unit(std::string_view text, const std::string& where) {
  if (text == "block") return GatherUnit::Block;
  if (text == "layer") return GatherUnit::Layer;
  throw InputError(where + ": expected block or layer, got '" + std::string(text) + "'");
}

std::vector<int> parameter_units(const std::vector<int>& block_of_layer, GatherUnit by) {
  std::vector<int> unit(block_of_layer.size());
  int next = 0;
  for (std::size_t i = 0; i < block_of_layer.size(); ++i) {
    const bool joins = by == GatherUnit::Block && i > 0 && block_of_layer[i] >= 0 && block_of_layer[i] == block_of_layer[i - 1];
    unit[i] = joins ? unit[i - 1] : next++;
  }
  return unit;
}

std::int64_t gather_ns(ElementRange range, std::int64_t elements, int workers, const CollectiveLink& link) {
  if (workers <= 1 || range.size() <= 0) return 0;
  std::int64_t total = 0;
  for (int r = 0; r < workers; ++r) {
    const std::int64_t part = overlap(range, owned_elements(elements, workers, r)).size();
    if (part > 0) total += tree_ns(4 * part, 1, workers, link, link.gather.known() ? link.gather : link.broadcast);
  }
  return total;
}

}  // namespace headroom::core
