#pragma once
// Sharded data parallel (ZeRO's stages, docs/design.md "Sharded data parallel") as plain numbers:
// which of the trainable parameters' elements each worker owns, and what the collectives that move
// the rest cost. Torch-free, so the planner and the executor cut the training state the same way.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/collective.h"

namespace headroom::core {

// The stages a plan may run: 0 replicates the training state on every worker (data parallel as
// PyTorch's DDP runs it); 1 shards the optimizer state: each worker steps only the parameters it
// owns and then sends them to the others; 2 shards the gradients as well: as backward makes each
// parameter's gradient, every worker reduces it to its owner(s) and lets go of it; 3 shards the
// parameters as well: a worker gathers a unit's parameters (a block's or a layer's: parameter_units)
// from their owners just before the unit runs (forward, recompute, backward) and lets go of them after.
inline constexpr int kMaxShardStage = 3;
// "stage 1 (optimizer state sharded)".
std::string shard_stage_name(int stage);

// A worker's share of the trainable parameters' elements, counted over every trainable parameter in
// layer order: one contiguous range.
struct ElementRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
  bool operator==(const ElementRange&) const = default;
};
// The elements two ranges share (empty, begin == end, where they share none).
ElementRange overlap(ElementRange a, ElementRange b);
// Worker `rank`'s range of `elements` over `workers`: ceil(elements / workers) each, the last ones
// shorter (empty where there are more workers than elements). Worker 0 owns the most.
ElementRange owned_elements(std::int64_t elements, int workers, int rank);

// A sharded worker steps its optimizer on pieces of its range of at most this many elements, so
// that the optimizer's temporaries (each as large as the tensor it steps) stay small.
inline constexpr std::int64_t kShardedOptimizerPieceElements = std::int64_t{1} << 20;

// What a sharded plan predicts of worker 0's parameter broadcast (core::Plan::predicted_parts).
inline constexpr std::string_view kParameterBroadcastSecondsPart = "parameter_broadcast_seconds";
// ... and at stage 2 its gradients' reduces over the step (every micro-batch's).
inline constexpr std::string_view kGradientReduceSecondsPart = "gradient_reduce_seconds";
// ... and at stage 3 its parameter gathers over the step (every micro-batch's).
inline constexpr std::string_view kParameterGatherSecondsPart = "parameter_gather_seconds";
// ... and of the step, how long its compute waits for the reduces (stage 2-3) and in the gathers
// (stage 3, the reduces queued before a gather included).
inline constexpr std::string_view kExposedGradientReduceSecondsPart = "exposed_gradient_reduce_seconds";
inline constexpr std::string_view kExposedParameterGatherSecondsPart = "exposed_parameter_gather_seconds";

// A stage-2 worker packs gradients, as backward makes them, into two buffers of at most this many
// elements (no more than the largest parameter's), and reduces a buffer to its owners once it is full.
inline constexpr std::int64_t kShardedReducePieceElements = std::int64_t{1} << 20;
// Each of those buffers' elements, for a model whose largest trainable parameter has `largest`.
inline std::int64_t reduce_buffer_elements(std::int64_t largest) { return std::min(largest, kShardedReducePieceElements); }

// A broadcast (one worker's bytes to every other) over `workers`: a binomial tree, ceil(log2 N)
// rounds of one message each (for 2 workers one message). 0 for one worker or nothing to send.
std::int64_t broadcast_ns(std::int64_t bytes, int workers, const CollectiveLink& link);
// A reduce (every worker's bytes summed on one) of `bytes` split into `messages` collectives: the
// same tree, each collective paying the latency on every round (0 messages: the bytes alone, for a
// share of collectives counted elsewhere).
std::int64_t reduce_ns(std::int64_t bytes, std::int64_t messages, int workers, const CollectiveLink& link);
// Whether a layer of this kind reads its parameters in backward, so that a stage-3 worker gathers
// them for it: an embedding's backward reads the indices and its output's gradient, not the table.
bool backward_reads_parameters(std::string_view kind);

// What a stage-3 worker gathers at a time: a block's layers (a run of consecutive layers with one
// block id of 0 or more; a layer outside blocks, -1, alone), as FSDP wraps a transformer's blocks,
// or each layer's alone, as DeepSpeed's ZeRO-3 fetches each module's. Blocks take fewer, larger
// gathers (each a wait for every worker); layers hold less in flight.
enum class GatherUnit { Block, Layer };
// "block" or "layer".
std::string_view gather_unit_name(GatherUnit unit);
// Throws InputError naming `where`, the text and the accepted names.
GatherUnit parse_gather_unit(std::string_view text, const std::string& where);
// Each layer's unit, numbered from 0 in layer order.
std::vector<int> parameter_units(const std::vector<int>& block_of_layer, GatherUnit unit);

// Gathering the float32 elements `range` of the flat order of `elements` onto every worker: a
// broadcast from each owner of its part, one after the other, each timed by the link's gather line
// where it has one.
std::int64_t gather_ns(ElementRange range, std::int64_t elements, int workers, const CollectiveLink& link);

}  // namespace headroom::core
