#pragma once
// One training step as a sequence of operations with durations, transient peaks and net memory
// changes, built from a trace's measurements and a step choice. It is the planner's one model of
// memory and time: the plan's prediction walks the sequence, and the simulator's schedule is made
// from the same sequence, so the two cannot disagree.
#include <cstdint>
#include <string>
#include <optional>
#include <vector>

#include "core/cost_model.h"
#include "core/schedule.h"
#include "core/step_choice.h"
#include "planner/layer_graph.h"

namespace headroom::planner {

// A micro-batch's layer work, and the bookkeeping around it: its input arriving, what its layers'
// measured changes leave over (the loss value and the like) and its input going once it is done,
// and the optimizer step.
// GradientCache: a contrastive model's embedding cache and RNG states allocated or released (Inf-CL,
// planner/infcl_model.h).
// CollectiveWait: a sharded worker's (stage 2-3) micro-batch waiting, past its compute, for the
// collectives it started (its gradients' reduces, and its layers' gathers).
enum class OpKind {
  Forward,
  ForwardNoGrad,
  Recompute,
  Backward,
  LoadInput,
  ReleaseLeftovers,
  ReleaseInput,
  Optimizer,
  GradientCache,
  CollectiveWait
};

struct Op {
  OpKind kind = OpKind::Forward;
  int layer = -1;  // -1 for bookkeeping ops
  std::int64_t duration_ns = 0;
  std::int64_t transient_bytes = 0;  // held while the op runs, above the level at its start
  std::int64_t retained_bytes = 0;   // net change of allocated bytes when it ends (signed)
  // A stage-3 worker's unit parameters gathered for the op: of transient_bytes, those gathered as it
  // starts; of retained_bytes, those it leaves gathered for later ops of the unit (a recompute, for
  // the backward after it) or lets go of (negative: the unit's last op to use them).
  std::int64_t gathered_bytes = 0;
  std::int64_t kept_gathered_bytes = 0;
  // The gather's time on the collective stream (not in duration_ns: the layer's work waits for it,
  // which CollectiveWait carries). Each gather but a micro-batch's first is prefetched: started as
  // the gathering op before it starts, its memory held from there (prefetched_bytes, of
  // transient_bytes, of every op from that one to the one before this).
  std::int64_t gather_ns = 0;
  bool gather_prefetched = false;
  std::int64_t prefetched_bytes = 0;
  int prefetch_ahead = 0;  // the gathering op whose gather this one starts: this many ops on (0: none)
  // A stage-2-3 worker's backward: its layer's gradients' reduces to their owners, on the collective
  // stream once it ends (not in duration_ns: CollectiveWait carries what the micro-batch waits for).
  std::int64_t reduce_ns = 0;
  // ... and the worker's copies for them on the compute thread after the backward (packing its
  // gradients, adding in the parts it owns): in the micro-batch's waits, as the executor measures them.
  std::int64_t reduce_copy_ns = 0;
};

const char* op_kind_name(OpKind kind);

// Every layer's cost at one micro-batch size, with the time scale that makes them add up to the
// plain step: computed once and reused for many choices of checkpointed blocks.
struct BatchCosts {
  std::int64_t batch = 0;
  double scale = 1;
  std::vector<core::LayerCost> layers;
  std::vector<core::LayerCost> tempo;  // Tempo's variants (the standard cost where a layer has none)
  std::int64_t checkpoint_state_bytes = 0;  // the trace's, per checkpointed block
  std::int64_t buffer_copy_bytes = 0;       // what a recompute on copies of a module's buffers may hold
  // Per layer, where the trace measured it as a checkpointed block of its own; empty where no layer has it.
  std::vector<std::optional<core::CheckpointedSample>> checkpointed;
};
BatchCosts batch_costs(const core::CostModel& costs, std::int64_t batch);

// The batch costs of the last few micro-batch sizes asked for, for a search that predicts many
// choices at the same sizes: interpolating every layer's cost is most of a prediction's time, and
// a split has at most two sizes.
class BatchCostsCache {
 public:
  explicit BatchCostsCache(const core::CostModel& costs) : costs_(costs) {}
  const core::CostModel& costs() const { return costs_; }
  // Valid until the next call.
  const BatchCosts& at(std::int64_t batch);

 private:
  const core::CostModel& costs_;
  std::vector<BatchCosts> recent_;  // oldest first
};

// The layer ops of layers [first, last] of one micro-batch at `costs`' size, run as `choice` says
// (its checkpointed blocks and layer variants; its micro-batches are not read): their forward
// part, then their backward part, in the order a whole micro-batch would run them. A variant counts
// wherever it applies: a Tempo layer in a checkpointed block runs as one in the block's recompute too.
// Layer times are scaled so one micro-batch takes the trace's plain step time.
std::vector<Op> micro_batch_ops(const BatchCosts& costs, const LayerGraph& graph, const core::StepChoice& choice,
                                int first, int last);

// Bytes a layer's Tempo variant stops keeping from its forward to its backward: its own smaller net
// change plus the inputs it releases to their last reader.
std::int64_t tempo_saved_bytes(const BatchCosts& costs, const LayerGraph& graph, int layer);

// The choice as the plan search makes them: Tempo on eligible layers outside checkpointed blocks,
// standard elsewhere (the search weighs a block's checkpointing against the standard layers it
// recomputes; a hand-made plan may keep Tempo layers there, and they are predicted as they run).
core::StepChoice effective_variants(const LayerGraph& graph, core::StepChoice choice);

// A plan's form of a working choice: one entry per trace layer with its name and whether its
// block is checkpointed, blocks in the order of the chain.
core::StepChoice complete_choice(const core::Trace& trace, const LayerGraph& graph, core::StepChoice choice);

// The whole step: each micro-batch's ops in order, then the optimizer. A run of micro-batches of
// one size shares its ops and is walked once (each micro-batch ends at the level it started from).
struct StepSequence {
  struct Segment {
    std::size_t ops = 0;       // index into `ops`
    std::int64_t batch = 0;    // micro-batch size; 0 for the optimizer
    std::int64_t first = 0;    // index of its first micro-batch
    std::int64_t repeat = 1;   // consecutive micro-batches running these ops
    bool keeps_input = false;  // the last micro-batch: its ops less the final release of its input
  };
  std::vector<std::vector<Op>> ops;  // one list per distinct micro-batch, and the optimizer's
  std::vector<Segment> segments;
  std::int64_t static_bytes = 0;  // parameters, gradients and optimizer state, before and after
};
// `cache`, when given and made from `costs`, supplies the batch costs. A step a technique runs its own
// way (L2L: planner/technique.h, step_runner) is not a sequence of micro-batches:
// predict_step and build_schedule hand it to that technique.
StepSequence step_sequence(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice,
                           BatchCostsCache* cache = nullptr);

// Consecutive micro-batches of one size.
struct MicroBatchRun {
  std::int64_t size = 0;
  std::int64_t count = 0;
  bool operator==(const MicroBatchRun&) const = default;
};
// `sizes` as runs, each as long as it can be.
std::vector<MicroBatchRun> micro_batch_runs(const std::vector<std::int64_t>& sizes);

// The micro-batches a step weighs (worker 0's, with several workers), as runs, and the samples of
// the whole step (every worker's): what step_sequence reads of a choice's micro-batches.
struct StepBatches {
  std::vector<MicroBatchRun> runs;
  std::int64_t samples = 0;
};
StepBatches step_batches(const core::StepChoice& choice);

// step_sequence for these batches in place of the choice's micro-batches, which it does not read:
// a search weighs splits of hundreds of thousands of micro-batches without listing them.
StepSequence step_sequence(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice,
                           const StepBatches& batches, BatchCostsCache* cache = nullptr);

struct Walk {
  std::int64_t peak_bytes = 0;  // above the level at the start
  int peak_op = -1;             // the op during which the peak occurs
  std::int64_t duration_ns = 0;
  std::int64_t recompute_ns = 0;
};
// Runs the ops in order from level 0.
Walk walk(const std::vector<Op>& ops);

// A whole step's predicted peak and time.
struct StepPrediction {
  std::int64_t peak_bytes = 0;
  std::int64_t step_ns = 0;
  std::string peak_at;  // "backward of layer3.attention (micro-batch of 8)", "optimizer step", ...
};
StepPrediction predict_step(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice,
                            BatchCostsCache* cache = nullptr);
// The same for these batches in place of the choice's micro-batches (not a step_runner's step).
StepPrediction predict_step(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice,
                            const StepBatches& batches, BatchCostsCache* cache = nullptr);

// The step as tasks on the compute stream, for the simulator: resident static state, each
// micro-batch's input and ops, and the optimizer step. A run of micro-batches of one size is its
// segment's tasks once with a core::Repeat, so the schedule grows with the layers and the distinct
// sizes, not with the number of micro-batches.
core::Schedule build_schedule(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice);

}  // namespace headroom::planner
