#pragma once
// Where a layer's scratch memory may step between two profiled sizes. Between them the cost model
// bounds a transient by the jump its segment can hide (cost_model.cpp, segment_slack: how much
// steeper the segment is than the layer's cost per sample); a plan at a size inside it is then
// predicted up to that jump over what runs. The profiler measures sizes inside the segments whose
// jump is a sizeable share of the step, which finds where the step is and leaves the line exact
// on both sides of it. Torch-free.
#include <cstdint>
#include <string>
#include <vector>

#include "core/trace.h"

namespace headroom::core {

struct TransientJump {
  std::int64_t from_batch = 0, to_batch = 0;  // consecutive profiled sizes, with sizes between them
  std::int64_t bytes = 0;                     // the largest jump a transient may hide there
  std::string layer;                          // whose
  std::string what;                           // "forward scratch", "backward scratch", ...
  // The size that halves the segment: profiled, it tells which half holds the step.
  std::int64_t middle() const { return (from_batch + to_batch) / 2; }
};

// Per segment between consecutive profiled sizes with sizes inside it, the largest step any layer's
// transient (standard, Tempo or checkpointed alone) shows there: a segment steeper than the layer's
// cost per sample followed by one that is not (nearly) as steep. Bytes that grow ever faster (a
// quadratic contrastive loss) and the last segment are left out: there the bound stays a bound.
// Segments with none are left out too. In ascending order of the segment.
std::vector<TransientJump> transient_jumps(const Trace& trace);

// The jumps worth locating: those more than `share` of the step's peak at the segment's end, at
// most `limit` of them (the largest first), in ascending order of the segment. Each is located by
// profiling its middle().
std::vector<TransientJump> jumps_worth_locating(const Trace& trace, double share, std::size_t limit);

}  // namespace headroom::core
