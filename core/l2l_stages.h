#pragma once
// L2L moves a model to the device a stage at a time: a stage is a run of consecutive layers
// with one block id (a model block, or a run of layers outside any). The planner times L2L by
// its stages and the executor runs them; both form them here, from the layers' block ids and inputs,
// so the two cannot disagree on what a stage holds or where L2L starts.
#include <cstddef>
#include <string_view>
#include <vector>

#include "core/step_choice.h"

namespace headroom::core {

// What an L2L plan predicts of its step for execute's report to set beside what it measures
// (core::Plan::predicted_parts): seconds a step per lane (the compute thread's work, the copies, the
// compute thread's waits for what it does not do itself, the host optimizer) and the host's peak.
inline constexpr std::string_view kL2LComputeSecondsPart = "l2l_compute_seconds";
inline constexpr std::string_view kL2LCopySecondsPart = "l2l_copy_seconds";
inline constexpr std::string_view kL2LWaitSecondsPart = "l2l_wait_seconds";
inline constexpr std::string_view kL2LHostOptimizerSecondsPart = "l2l_host_optimizer_seconds";
inline constexpr std::string_view kL2LHostBytesPart = "l2l_host_bytes";

struct L2LStage {
  int first = 0, last = 0;   // layer ids
  std::vector<int> inputs;   // earlier stages' layers it reads, in the order its layers read them
  std::vector<int> exports;  // its layers that later stages read
};

struct L2LStages {
  std::vector<L2LStage> stages;
  std::vector<int> stage_of;      // per layer
  std::vector<int> first_reader;  // per layer: the earliest later stage that reads it, -1 none
};

// `blocks[i]` and `inputs[i]`: layer i's block id and the layers it reads (negative ids: the batch
// and other inputs from outside the layers). Both of one size.
L2LStages l2l_stages(const std::vector<int>& blocks, const std::vector<std::vector<int>>& inputs);

// The stage where L2L starts for `from_block` (L2LChoice::from_block): 0 for the whole
// model (L2LChoice::kWholeModel), else the first stage of that block; -1 when no stage is. The
// stages before it stay on the device. `Stage`: L2LStage or a type made from it.
template <typename Stage>
int first_offloaded_stage(const std::vector<Stage>& stages, const std::vector<int>& blocks, int from_block) {
  if (from_block == L2LChoice::kWholeModel) return 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (blocks[static_cast<std::size_t>(stages[s].first)] == from_block) return static_cast<int>(s);
  }
  return -1;
}

}  // namespace headroom::core
