#pragma once
// L2L step (executor/l2l_runner.h) predicted from a trace: the device-side memory over the
// step and its compute time. L2L runs stage by stage (a stage: a model block, or a run of
// layers outside any block), every micro-batch through a stage before the next; the device holds
// the running stage's parameters and the next one's (prefetched), the stashed stage boundaries,
// the micro-batches' inputs, and one micro-batch's work in one stage. Parameters, gradients and
// optimizer state live on the host and are reported, not budgeted.
#include <cstdint>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/l2l_refusal.h"
#include "core/l2l_stages.h"
#include "core/schedule.h"
#include "core/step_choice.h"
#include "planner/layer_graph.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"

namespace headroom::planner {

// An L2L stage (core/l2l_stages.h) with the bytes of its parameters.
struct L2LStageCost : core::L2LStage {
  std::int64_t parameter_bytes = 0;
};

// Why L2L cannot run the traced model (core/l2l_refusal.h).
using core::l2l_refusal;

// The stages L2L forms from the trace's block ids (core::l2l_stages, as the executor forms
// them from the model's).
std::vector<L2LStageCost> l2l_stage_costs(const core::Trace& trace);

// The index of the stage where L2L starts for `from_block` (L2LChoice): 0 for the whole
// model, -1 when no stage starts that block. The stages before it stay on the device.
int first_offloaded_stage(const std::vector<L2LStageCost>& stages, const core::Trace& trace, int from_block);

// The most micro-batches an L2L step may have: L2L holds every micro-batch's input and one
// RNG state per stage and micro-batch on the device, and its model walks every micro-batch.
inline constexpr std::size_t kMaxL2LMicroBatches = 1024;

// One op of L2L's step on the device: the bytes on the device by kind as it starts, and what
// it holds above them while it runs.
struct L2LOp {
  OpKind kind = OpKind::Forward;  // ForwardNoGrad, Recompute, Backward, or Optimizer (a stage kept on the device)
  int layer = 0;
  int stage = 0;
  int micro_batch = 0;
  std::int64_t duration_ns = 0;
  std::int64_t input_bytes = 0, parameter_bytes = 0, gradient_bytes = 0, activation_bytes = 0;
  std::int64_t optimizer_state_bytes = 0;  // the device-kept stages' (from a chosen block on)
  std::int64_t transient_bytes = 0;
  // The constant-memory variant's boundary copies around it, on the compute thread: brought from
  // the host before it, sent there after it.
  std::int64_t copy_in_ns = 0, copy_out_ns = 0;
  std::int64_t level() const {
    return input_bytes + parameter_bytes + gradient_bytes + activation_bytes + optimizer_state_bytes;
  }
};

struct L2LPrediction {
  std::int64_t device_peak_bytes = 0;
  std::string peak_at;                  // "backward of stage 3 (layer2.*), micro-batch 0"
  // The host's peak: the offloaded parameters and optimizer state, every stage's RNG states, (on a
  // CPU) the model's other tensors, the constant-memory variant's stash and boundary gradients, and
  // one stage's gradients with its optimizer step's temporaries at a time.
  std::int64_t host_bytes = 0;
  // Forward, recompute and backward of every stage and micro-batch, and the kept stages' optimizer
  // steps (with their share of zeroing the gradients).
  std::int64_t compute_ns = 0;
  std::int64_t copy_bytes = 0;          // parameters to the device (twice per step), gradients back, stashed boundaries
  // The constant-memory variant's stashed boundaries and their gradients, to the host and back (in
  // copy_bytes and copy_ns): made on the compute thread, so they lengthen the step too.
  std::int64_t stash_copy_bytes = 0, stash_copy_ns = 0;
  // The three lanes of L2L's step (l2l_schedule draws them): the device computing, the copies
  // (parameters in at the trace's host-to-device bandwidth, gradients out at its device-to-host one;
  // 0 where the trace measured none), the host optimizer stepping each stage (the trace's optimizer
  // time shared by parameter bytes: a CPU trace measured it on the host; a GPU trace at the host's
  // own rate, optimizer.host_ns_per_param, where it measured one).
  std::int64_t copy_ns = 0;
  std::int64_t host_optimizer_ns = 0;
  std::int64_t step_ns = 0;             // the three lanes as L2L orders them
  // A CPU trace, whose L2L step runs as executor/l2l_execute.cpp runs it on the CPU: a stage computes
  // once the next stage's parameters have landed (settle_prefetch), so copies do not overlap
  // compute; gradients go to the host on the compute thread; and the host optimizer runs on the
  // cores the compute uses, so its time adds to the step (overlapping it with the compute saves
  // nothing there: docs/design.md, "L2L"). On CUDA (false) copies run on their own streams beside
  // the compute, the parameters' as prefetches, the gradients' before their stage's host optimizer
  // step, which runs beside the compute too.
  bool host_shares_compute = false;
  std::string bound;                    // the lane busy longest: "compute", "transfer" or "host optimizer"
  double bound_ratio = 0;               // its busy time over the next lane's
  std::int64_t largest_stage_parameter_bytes = 0;
  std::int64_t host_stash_bytes = 0;    // the constant-memory variant's stash at its largest (in host_bytes)
  int stages = 0;
  int kept_stages = 0;                   // before the chosen block: on the device, trained there
  std::int64_t kept_bytes = 0;           // their parameters and optimizer state, on the device throughout
};

// "compute-bound (3.2x the next lane): compute 0.4274 s, copies 0.1326 s, host optimizer 0.0198 s;
// step 0.5741 s": the lane busy longest, by how much, and each lane's time.
std::string describe_l2l_bound(const L2LPrediction& prediction);

// `l2l.boundaries_on_host`: L2L's constant-memory variant (stash and boundary gradients on the
// host); `l2l.from_block`: the stages before it stay on the device, their optimizer stepping
// there after their backward. `ops`, when given, receives the step's device ops in order (for the
// simulator's schedule). `l2l.from_block` must name a block (check_choice checks plans).
L2LPrediction predict_l2l_step(const core::CostModel& costs, const LayerGraph& graph,
                               const std::vector<std::int64_t>& micro_batches, const core::L2LChoice& l2l,
                               std::vector<L2LOp>* ops = nullptr);

// predict_step's answer for a choice with `l2l` set.
StepPrediction l2l_step_prediction(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice);

// build_schedule's for a choice with `l2l` set: L2L's ops on the compute stream, memory by
// kind (parameters: the stages on the device; gradients: the running stage's), then the part of
// the host optimizer's step nothing hides (stage 0's) on the host stream. Copies are not tasks yet.
core::Schedule l2l_schedule(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice);

// The largest model of this trace's kind that L2L can train at these micro-batches: the trace's
// model with its largest block repeated (L2L's device memory does not grow with the parameters of
// more blocks, only with their stashed outputs when boundaries stay on the device); the device
// limit bounds the stash, the host memory the parameters, gradients and optimizer state.
struct L2LCapacity {
  bool fits = false;              // the trace's model itself fits under the device limit
  std::int64_t device_peak_bytes = 0;   // the trace's model's predicted peak
  std::string block;              // "layer3.qkv..layer3.ffn_ln": the block repeated
  std::int64_t block_parameter_bytes = 0;
  std::int64_t device_bytes_per_block = 0;  // stash a block adds on the device
  std::int64_t host_bytes_per_block = 0;    // parameters, gradients, optimizer state (and stash) it adds on the host
  std::int64_t extra_blocks = 0;  // blocks added to the trace's model
  bool unbounded = false;         // neither the device nor (an unknown) host memory bounds it
  std::string bound;              // "device budget" or "host memory"
  double parameters = 0;          // parameter count of the largest model (elements)
  double bytes_per_parameter = 4; // parameter bytes per element (from the optimizer state when measured)
};
L2LCapacity largest_l2l_model(const core::CostModel& costs, const LayerGraph& graph,
                              const std::vector<std::int64_t>& micro_batches, bool boundaries_on_host,
                              std::int64_t device_limit_bytes, std::int64_t host_memory_bytes);

// Where nothing fits `request` and it did not allow L2L: the least budget with L2L as well (its host
// side within `host_memory_bytes`, 0: not checked), where L2L can run the model on one device
// and needs less than `without` names; 0 otherwise (and where nothing was allowed: "none").
std::int64_t least_budget_with_l2l(const core::Trace& trace, const PlanRequest& request, const PlanOutcome& without,
                                   std::int64_t host_memory_bytes);

}  // namespace headroom::planner
