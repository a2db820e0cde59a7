#include "core/sharding.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace headroom::core {

std::string shard_stage_name(int stage) {
  switch (stage) {
    case 0: return "stage 0 (replicated)";
    case 1: return "stage 1 (optimizer state sharded)";
    default: throw std::logic_error("shard_stage_name: no stage " + std::to_string(stage));
  }
}

ElementRange owned_elements(std::int64_t elements, int workers, int rank) {
  if (workers < 1 || rank < 0 || rank >= workers || elements < 0) throw std::logic_error("owned_elements: bad worker or count");
  const std::int64_t each = (elements + workers - 1) / workers;
  const std::int64_t begin = std::min(elements, each * rank);
  return {begin, std::min(elements, begin + each)};
}

std::int64_t broadcast_ns(std::int64_t bytes, int workers, const CollectiveLink& link) {
  if (workers <= 1 || bytes <= 0) return 0;
  const auto rounds = static_cast<std::int64_t>(std::ceil(std::log2(static_cast<double>(workers))));
  return transfer_ns(bytes * rounds, link.bytes_per_second, link.latency_ns, rounds);
}

}  // namespace headroom::core
