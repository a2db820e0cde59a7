#pragma once
// L2L's relay step (executor/l2l_relay.h) predicted from a trace: the device-side memory over the
// step and its compute time. The relay runs stage by stage (a stage: a model block, or a run of
// layers outside any block), every micro-batch through a stage before the next; the device holds
// the running stage's parameters and the next one's (prefetched), the stashed stage boundaries,
// the micro-batches' inputs, and one micro-batch's work in one stage. Parameters, gradients and
// optimizer state live on the host and are reported, not budgeted.
#include <cstdint>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "planner/layer_graph.h"

namespace headroom::planner {

struct L2LStage {
  int first = 0, last = 0;          // layer ids
  std::int64_t parameter_bytes = 0;
  std::vector<int> inputs;          // earlier stages' layers it reads
  std::vector<int> exports;         // its layers read by later stages
};

// The stages the relay forms from the trace's block ids, as the executor forms them from the model's.
std::vector<L2LStage> l2l_stages(const core::Trace& trace);

struct L2LPrediction {
  std::int64_t device_peak_bytes = 0;
  std::string peak_at;                  // "backward of stage 3 (layer2.*), micro-batch 0"
  std::int64_t host_bytes = 0;          // parameters, gradients and optimizer state on the host
  std::int64_t compute_ns = 0;          // forward, recompute and backward of every stage and micro-batch
  std::int64_t copy_bytes = 0;          // parameters to the device (twice per step) and gradients back
  std::int64_t host_optimizer_ns = 0;   // the trace's optimizer step: on the host, overlapped but for the first stage's
  std::int64_t step_ns = 0;             // compute plus what cannot overlap (the first stage's host optimizer step)
  std::int64_t largest_stage_parameter_bytes = 0;
};

// `boundaries_on_host`: L2L's constant-memory variant (stash and boundary gradients on the host).
L2LPrediction predict_l2l_step(const core::CostModel& costs, const LayerGraph& graph,
                               const std::vector<std::int64_t>& micro_batches, bool boundaries_on_host);

}  // namespace headroom::planner
