#pragma once
// One micro-batch's forward and backward as a sequence of operations with durations, transient
// peaks and net memory changes, built from a trace's measurements. It is the planner's model of
// memory and time: the search walks it, and the schedule for the simulator is made from it.
#include <cstdint>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/schedule.h"
#include "planner/layer_graph.h"

namespace headroom::planner {

enum class OpKind { Forward, ForwardNoGrad, Recompute, Backward };

struct Op {
  OpKind kind = OpKind::Forward;
  int layer = 0;
  std::int64_t duration_ns = 0;
  std::int64_t transient_bytes = 0;  // held while the op runs, above the level at its start
  std::int64_t retained_bytes = 0;   // net change of allocated bytes when it ends (signed)
};

const char* op_kind_name(OpKind kind);

// The ops of one micro-batch of `batch` samples with the given blocks checkpointed (a flag per
// LayerGraph block) and the given layers running Tempo's lean variant (a flag per layer; empty:
// none). A lean flag counts only outside checkpointed blocks, whose recompute runs the standard
// layers. Layer times are scaled so one micro-batch takes the trace's plain step time.
std::vector<Op> micro_batch_ops(const core::CostModel& costs, const LayerGraph& graph, std::int64_t batch,
                                const std::vector<bool>& checkpointed, const std::vector<bool>& lean = {});

// Every layer's cost at one micro-batch size, with the time scale that makes them add up to the
// plain step: computed once and reused for many choices of checkpointed blocks.
struct BatchCosts {
  std::int64_t batch = 0;
  double scale = 1;
  std::vector<core::LayerCost> layers;
  std::vector<core::LayerCost> lean;  // Tempo's variants (the standard cost where a layer has none)
};
BatchCosts batch_costs(const core::CostModel& costs, std::int64_t batch);

// The ops of layers [first, last] only (their forward part, then their backward part, in the
// order a whole micro-batch would run them).
std::vector<Op> micro_batch_ops(const BatchCosts& costs, const LayerGraph& graph, const std::vector<bool>& checkpointed,
                                int first, int last, const std::vector<bool>& lean = {});

// Bytes a layer's lean variant stops keeping from its forward to its backward: its own smaller net
// change plus the inputs it releases to their last reader.
std::int64_t lean_saved_bytes(const BatchCosts& costs, const LayerGraph& graph, int layer);

// Which lean flags take effect: eligible layers outside checkpointed blocks.
std::vector<bool> effective_lean(const LayerGraph& graph, const std::vector<bool>& checkpointed,
                                 const std::vector<bool>& lean);

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
StepPrediction predict_step(const core::CostModel& costs, const LayerGraph& graph,
                            const std::vector<std::int64_t>& micro_batches, const std::vector<bool>& checkpointed,
                            const std::vector<bool>& lean = {});

// The step as tasks on the compute stream, for the simulator: resident static state, each
// micro-batch's input and ops, and the optimizer step.
core::Schedule build_schedule(const core::CostModel& costs, const LayerGraph& graph,
                              const std::vector<std::int64_t>& micro_batches, const std::vector<bool>& checkpointed,
                              const std::vector<bool>& lean = {});

}  // namespace headroom::planner
