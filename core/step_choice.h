#pragma once
// How one training step runs: the value every consumer of a plan reads (the planner's predictor,
// the simulator's schedule, the plan file, the executor, the desktop app). A technique that changes
// how a step runs adds its choice here, once, instead of another list beside the others.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/collective.h"
#include "core/sharding.h"

namespace headroom::core {

// Which implementation of a layer runs. Tempo's memory-lean variant keeps less for backward. A new
// variant adds its value here and its name to the table below.
enum class LayerVariant : std::uint8_t { Standard, Tempo };
inline constexpr auto kVariantNames = std::to_array<std::pair<LayerVariant, std::string_view>>({
    {LayerVariant::Standard, "standard"},
    {LayerVariant::Tempo, "tempo"},
});

// As the plan file spells it ("standard", "tempo").
std::string_view variant_name(LayerVariant variant);
std::optional<LayerVariant> variant_named(std::string_view name);
// "standard or tempo", for errors.
std::string variant_names();

struct LayerStep {
  int id = 0;
  std::string name;
  bool checkpoint = false;  // recomputed in backward as part of a checkpointed block
  LayerVariant variant = LayerVariant::Standard;
  bool operator==(const LayerStep&) const = default;
};

// Inf-CL's tile of the contrastive loss (docs/design.md, "Inf-CL"): rows of the image embeddings
// per block, text embeddings per column tile.
struct LossTiles {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  bool operator==(const LossTiles&) const = default;
};

// L2L (executor/l2l_runner.h): parameters, gradients and optimizer state live on
// the host and the step runs stage by stage, every micro-batch through a stage before the next. The
// outputs later stages read are stashed on the device, or on the host (the constant-memory variant).
// From a chosen block on: the stages before that block stay on the device and train there as
// ordinary training does (their parameters, gradients and optimizer state never move).
struct L2LChoice {
  bool boundaries_on_host = false;
  int from_block = kWholeModel;  // the first block offloaded, as the trace numbers blocks
  static constexpr int kWholeModel = -1;
  bool whole_model() const { return from_block == kWholeModel; }
  bool operator==(const L2LChoice&) const = default;
};

// Data parallel (executor/data_parallel.h): `workers` processes, each running its share of the
// micro-batches, their gradients all-reduced over a ring in buckets; a contrastive loss then runs as
// Inf-CL's ring over every worker's embeddings (the planner predicts it, the executor attaches it).
struct DataParallelChoice {
  int workers = 2;
  // How many of the step's micro_batches each worker runs, in rank order (worker 0 the first ones):
  // a plan's micro_batches are the whole global batch, so b_i / B weighs each over it. Empty: every
  // worker runs micro_batches (the search's working choices weigh one worker).
  std::vector<int> micro_batches_per_worker;
  CollectiveLink link;  // what the all-reduce's time is predicted from
  std::int64_t bucket_cap_bytes = kDefaultBucketCapBytes;
  // ZeRO's stage (core/sharding.h): 0 every worker holds the whole training state; 1 each holds
  // 1/N of the optimizer state and sends the parameters it stepped to the others.
  int shard_stage = 0;
  // Stage 3: what a worker gathers at a time.
  GatherUnit gather = GatherUnit::Block;
  bool operator==(const DataParallelChoice&) const = default;
};

struct StepChoice {
  std::vector<std::int64_t> micro_batches;  // sizes, in the order they run
  std::vector<int> checkpointed_blocks;     // block ids as the trace numbers them
  // By layer id. The planner's working choices may leave it empty or without names (every layer
  // standard); a plan's choice has one entry per trace layer.
  std::vector<LayerStep> layers;
  // Set: the step runs on more than one worker.
  std::optional<DataParallelChoice> data_parallel;
  // A contrastive loss run as Inf-CL's ring across the data-parallel workers: each worker's loss
  // over every worker's embeddings, passed worker to worker (planner/ring_infcl_model.h,
  // executor/ring_peers.h). The planner sets it for a contrastive model on several workers.
  bool ring_loss = false;
  // A contrastive model's loss (the trace has a contrastive_loss profile): tiled as Inf-CL with
  // these tiles, or the standard B x B loss when unset. Its towers run under a gradient cache
  // where the step splits the batch (caches_contrastive_gradients).
  std::optional<LossTiles> loss_tiles;
  // Set: the step runs as L2L (no checkpointing, standard layers, one worker).
  std::optional<L2LChoice> l2l;

  bool operator==(const StepChoice&) const = default;

  std::int64_t samples() const;
  // The workers the step runs on: 1 without data parallel.
  int workers() const { return data_parallel ? data_parallel->workers : 1; }
  // Worker `rank`'s micro-batches, and the index of its first one in micro_batches.
  std::vector<std::int64_t> worker_micro_batches(int rank) const;
  std::size_t first_micro_batch(int rank) const;
  LayerVariant variant(int layer) const {
    const auto i = static_cast<std::size_t>(layer);
    return i < layers.size() ? layers[i].variant : LayerVariant::Standard;
  }
  bool is_tempo(int layer) const { return variant(layer) == LayerVariant::Tempo; }
  int tempo_count() const;
  // The same choice for other micro-batches.
  StepChoice with_micro_batches(std::vector<std::int64_t> sizes) const {
    StepChoice out = *this;
    out.micro_batches = std::move(sizes);
    return out;
  }
  // Makes `layer` run `variant` (adding standard entries up to it).
  void set_variant(int layer, LayerVariant variant);
};

// A contrastive loss couples every sample of the step: where the step splits them, over more than
// one micro-batch or over workers (whose loss is then the ring's, over every worker's embeddings),
// the towers run under a gradient cache so that the loss still sees the whole batch. The planner
// predicts and the executor runs by this one rule; `micro_batches`: the step's, all of them or one
// worker's (with several workers the answer is the same).
inline bool caches_contrastive_gradients(std::int64_t micro_batches, int workers) {
  return micro_batches > 1 || workers > 1;
}

}  // namespace headroom::core
