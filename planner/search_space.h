#pragma once
// What the plan search may try for a request: each technique opens its part (Technique::open, in
// its own file) before the search weighs the splits (plan_search.cpp). Torch-free.
#include <cstdint>
#include <optional>
#include <vector>

#include "core/step_choice.h"

namespace headroom::planner {

struct SearchSpace {
  bool micro_batching = false;
  bool checkpointing = false;
  bool tempo = false;  // asked for, and the trace has Tempo layers
  std::int64_t limit = 0;
  // What every choice starts from: data parallel's workers, link and buckets, and its ring loss.
  core::StepChoice base;
  // A contrastive model's loss: each option in turn (the standard loss, and Inf-CL's measured
  // tiles when asked for), or the one in `tiles` when this is empty.
  std::vector<std::optional<core::LossTiles>> loss_options;
  std::optional<core::LossTiles> tiles;
  bool l2l = false;              // asked for, and L2L can run the model
  std::int64_t host_memory = 0;  // what L2L's host side may fill (0: not checked)
};

}  // namespace headroom::planner
