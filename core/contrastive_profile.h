#pragma once
// What the profiler measured of a contrastive model's loss alone (docs/design.md, "Inf-CL"): the loss
// layer run on given embeddings at batch sizes far past the towers' micro-batches, as the standard
// B x B loss, as the tiled loss per tile, and as the gradient cache's surrogate (which hands the
// towers their cached embedding gradients). Torch-free: the planner reads it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace headroom::core {

class JsonNode;

enum class ContrastiveMode { Standard, Tiled, Surrogate };
std::string_view contrastive_mode_name(ContrastiveMode mode);

struct ContrastiveSample {
  ContrastiveMode mode = ContrastiveMode::Standard;
  std::int64_t batch = 0;
  std::int64_t tile_rows = 0;  // tiled only
  std::int64_t tile_cols = 0;
  // As a layer's (core::LayerCost): times are medians; transient is the highest allocated above
  // the start of the phase; retained the net change across it (forward keeps what backward needs,
  // backward leaves the embeddings' gradients and frees what forward kept).
  std::int64_t fwd_ns = 0;
  std::int64_t bwd_ns = 0;
  std::int64_t fwd_transient_bytes = 0;
  std::int64_t fwd_retained_bytes = 0;
  std::int64_t bwd_transient_bytes = 0;
  std::int64_t bwd_retained_bytes = 0;
  bool operator==(const ContrastiveSample&) const = default;
};

struct ContrastiveProfile {
  int layer = -1;          // the loss layer's id
  std::int64_t dim = 0;    // embedding dimension
  std::vector<ContrastiveSample> samples;
  bool operator==(const ContrastiveProfile&) const = default;
};

nlohmann::json to_json(const ContrastiveProfile& profile);
// Checks every field (modes, positive sizes, at least three standard batch sizes, two per tile and
// two surrogate ones, each batch at least its tile); `layers` is the trace's layer count.
ContrastiveProfile read_contrastive_profile(const JsonNode& node, std::size_t layers);

}  // namespace headroom::core
