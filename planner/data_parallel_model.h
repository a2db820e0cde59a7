#pragma once
// Data parallel in the step's model (executor/data_parallel.h runs it): each worker runs its share
// of the global batch as micro-batches, and the gradients are all-reduced bucket by bucket over a
// ring while the last micro-batch's backward is still running; the optimizer waits for the last
// bucket. Each worker keeps a communication buffer per bucket beside its gradients. The plan and
// the simulator predict worker 0, which carries the largest share. Sharded (ZeRO's stages,
// core/sharding.h), each worker keeps the optimizer state of its range of the parameters alone,
// steps that range and broadcasts it to the others; at stage 2 it keeps its range's gradients
// alone too, the gradients packed into two buffers as backward makes them and reduced to their owners
// as each fills, beside the backward that follows; at stage 3 its
// range's parameters alone too, each unit's (a block's or a layer's) gathered from their owners for its work.
#include <cstdint>
#include <vector>

#include "core/collective.h"
#include "core/cost_model.h"
#include "core/schedule.h"
#include "core/step_choice.h"
#include "core/trace.h"
#include "planner/layer_graph.h"
#include "planner/step_sequence.h"

namespace headroom::planner {

// The trace's gradients in buckets (whole layers, last layer first) under the choice's cap.
std::vector<core::GradientBucket> plan_buckets(const core::CostModel& costs, const core::StepChoice& choice);

// The executor's copies of `bytes` between gradients and the collectives' buffers, `passes` times
// a copy's traffic (an add into a gradient reads two and writes one: 1.5), on the compute thread.
std::int64_t gradient_copy_ns(const core::CostModel& costs, std::int64_t bytes, double passes);

// Bytes each worker keeps for its buckets: 0 with one worker.
std::int64_t bucket_buffer_bytes(const core::CostModel& costs, const core::StepChoice& choice);

// Each bucket's all-reduce within the last micro-batch: it may start once the op that completes the
// bucket's gradients (the backward of its lowest layer) has ended, and the ring takes `duration_ns`.
struct BucketAllReduce {
  std::size_t ready_after_op = 0;  // index into the last micro-batch's ops
  std::int64_t bytes = 0;
  std::int64_t duration_ns = 0;
  std::int64_t start_ns = 0;  // from the start of the last micro-batch: after it is ready and after the bucket before
  std::int64_t end_ns = 0;
  std::int64_t copy_ns = 0;  // its gradients' copy into it, and again of its sum back into them
};
struct AllReduceTiming {
  std::vector<BucketAllReduce> buckets;
  std::int64_t total_ns = 0;    // all buckets' ring time
  // How far the last bucket's sum is copied back past the last micro-batch's ops and the copies
  // into the buckets: what the worker waits for after its backward.
  std::int64_t exposed_ns = 0;
  // How far the link runs past the last micro-batch's ops (its time beside them is the rest).
  std::int64_t link_past_compute_ns = 0;
  // The gradients copied into their buckets as backward makes them, on the compute thread.
  std::int64_t copy_in_ns = 0;
  // What the backward lost to the buckets beside it (CollectiveLink::beside_compute), after that.
  std::int64_t beside_ns = 0;
};
// `last_ops`: the last micro-batch's ops as the step sequence runs them.
AllReduceTiming allreduce_timing(const core::CostModel& costs, const std::vector<Op>& last_ops, const core::StepChoice& choice);

// Appends each bucket's all-reduce as a task on the collective stream, after the task that completes
// its gradients (`task_of_op`: the last micro-batch's task per op) and after the bucket before.
// Returns the last one's index, or -1 when there are none.
int append_allreduce_tasks(const core::CostModel& costs, const std::vector<Op>& last_ops, const core::StepChoice& choice,
                           const std::vector<int>& task_of_op, core::Schedule& schedule);

// What worker 0 of `choice` holds from its first micro-batch to its last: parameters, gradients,
// its share of the optimizer state (all of it at stage 0), the model's other state and its buckets.
std::int64_t worker_static_bytes(const core::CostModel& costs, const core::StepChoice& choice);
// Worker 0's share of the optimizer state.
std::int64_t worker_optimizer_state_bytes(const core::CostModel& costs, const core::StepChoice& choice);
// Worker 0's optimizer step: the trace's, over its share of the parameters, and sharded, the
// parameters' broadcast that follows it (every worker's range to the others), which the optimizer's
// phase runs.
std::int64_t worker_optimizer_ns(const core::CostModel& costs, const core::StepChoice& choice);
// Worker 0's gradients: all of them, or at stage 2 its range's and the two buffers it packs them
// into to reduce them.
std::int64_t worker_gradient_bytes(const core::CostModel& costs, const core::StepChoice& choice);
// Stage 2, per layer: the reduces of gradients to their owners that start once its backward has
// made its gradients (the buffers it fills), one micro-batch's (empty below stage 2); and a
// step's, every micro-batch's.
std::vector<std::int64_t> gradient_reduce_ns(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice);
std::int64_t gradient_reduce_step_ns(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice);
// Stage 2-3: the collectives a micro-batch's reduces start, one per owner whose range a buffer
// spans (0 below stage 2).
std::int64_t gradient_reduce_collectives(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice);
// Stage 2-3, per layer: the worker's copies for a micro-batch's reduces on its compute thread, after
// the layer's backward: its gradients packed into a buffer, and the parts it owns of the buffers
// whose reduces gradient_reduce_ns places there added into its range's gradients.
std::vector<std::int64_t> gradient_reduce_copy_ns(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice);
// Stage 2-3: sets each backward's reduce_ns and reduce_copy_ns in a micro-batch's ops from
// `reduce_ns` and `copy_ns` (per layer; copy_ns may be empty: none); whether any reduce is set.
bool add_gradient_reduces(std::vector<Op>& ops, const std::vector<std::int64_t>& reduce_ns,
                          const std::vector<std::int64_t>& copy_ns = {});
// Stage 2-3: how much longer a micro-batch's ops (`ops`, in order) take than their durations, for
// the collectives on the worker's one communication thread, which runs them in the order they
// start: a buffer's reduces as the backward filling it ends, then backward waits for the other
// buffer's reduces before it fills that one; each gather (stage 3) after what is queued before it,
// a micro-batch's first as its op starts and each other as the gathering op before it starts
// (prefetched), the layer's work after its gather; the micro-batch ends once its last reduce has.
// A collective beside the compute slows it by its time times `beside_compute` (the link's
// CollectiveLink::beside_compute), which this adds too.
std::int64_t collectives_past_compute_ns(const std::vector<Op>& ops, double beside_compute);
// ... and, of that model, how long the compute thread waits in the gathers (from reaching one to
// its end, where that is later) and for the reduces' buffers and the micro-batch's last
// reduce: what the executor measures of them. A step's: every micro-batch's.
struct CollectiveWaits {
  std::int64_t gather_ns = 0;
  std::int64_t reduce_ns = 0;
  std::int64_t beside_ns = 0;  // the compute's loss to the collectives that ran beside it
};
CollectiveWaits collective_waits(const std::vector<Op>& ops, double beside_compute);
CollectiveWaits step_collective_waits(const StepSequence& seq, double beside_compute);
// The schedule's task for what a worker's compute lost to the collectives beside it.
inline constexpr std::string_view kBesideComputeCategory = "slowed by collectives";
// The broadcast alone (0 unsharded).
std::int64_t parameter_broadcast_ns(const core::CostModel& costs, const core::StepChoice& choice);
// The optimizer's temporaries on worker 0: sharded, as large as the largest piece it steps where the
// trace recorded its largest parameter; the trace's otherwise.
std::int64_t worker_optimizer_transient_bytes(const core::CostModel& costs, const core::StepChoice& choice);

// Stage 3, per unit (a block's layers or a layer's, as the choice gathers: core::parameter_units):
// the bytes of its trainable parameters, which worker 0 gathers from their owners before the unit's
// forward and again before its backward (or its recompute, which keeps them for the backward) and
// lets go of after each, and the broadcasts each gather takes. A unit whose backward does not read
// them (an embedding's) is not gathered for it.
struct ParameterGather {
  std::int64_t bytes = 0;
  std::int64_t ns = 0;
  bool for_backward = true;
  // Its first and last layers with trainable parameters: a forward gathers at the first and lets
  // go after the last; a backward lets go once the first's has made its gradients.
  int first_layer = -1;
  int last_layer = -1;
};
// Empty below stage 3.
struct ParameterUnits {
  std::vector<int> unit_of_layer;
  std::vector<ParameterGather> units;
  bool empty() const { return units.empty(); }
};
ParameterUnits parameter_gathers(const LayerGraph& graph, const core::StepChoice& choice);
// The gathers in a micro-batch's layer ops (in the order they run): a unit's parameters are gathered
// by the op of its first layer that uses them and held to the op that lets them go (a forward's last
// layer, a backward's first; a recompute keeps them for its backward); each gather but the first is
// prefetched (Op::gather_prefetched), its memory held from the gathering op before it.
void add_parameter_gathers(std::vector<Op>& ops, const LayerGraph& graph, const ParameterUnits& gathers);
// A step's gathers: each micro-batch's, as its ops run them.
std::int64_t parameter_gather_step_ns(const StepSequence& seq);
// Worker 0's parameters: all of them, or at stage 3 its range of those that train and every frozen one.
std::int64_t worker_parameter_bytes(const core::CostModel& costs, const core::StepChoice& choice);

// The shares of `global_batch` over `workers`, larger first: the remainder's extra samples go to
// the lowest ranks, one each.
std::vector<std::int64_t> worker_shares(std::int64_t global_batch, int workers);

}  // namespace headroom::planner
