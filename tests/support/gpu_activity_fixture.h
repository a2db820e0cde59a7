#pragma once
// GPU activity built in memory, for the tests of its attribution to layers and of its Chrome trace
// lanes: no CUDA needed.
#include <cstdint>

#include "profiler/gpu/activity.h"

namespace headroom::testing {

// Three layers; forward of layer 0 and 1, backward of layer 1, the optimizer, and one kernel
// launched outside any range.
struct GpuActivityFixture {
  profiler::gpu::RangeTable ranges;
  profiler::gpu::ActivityLog log;
  std::uint64_t fwd0, fwd1, bwd1, opt;

  GpuActivityFixture() {
    using profiler::gpu::CopyActivity;
    using profiler::gpu::Phase;
    fwd0 = ranges.open(0, Phase::Forward);
    fwd1 = ranges.open(1, Phase::Forward);
    bwd1 = ranges.open(1, Phase::Backward);
    opt = ranges.open(-1, Phase::Optimizer);
    log.external_ids = {{10, fwd0}, {11, fwd0}, {20, fwd1}, {30, bwd1}, {31, bwd1}, {40, opt}};
    log.kernels = {
        {"gemm", 1000, 1400, 0, 7, 10},
        {"bias", 1500, 1600, 0, 7, 11},
        {"gelu", 2000, 2300, 0, 7, 20},
        // Two backward kernels on different streams that overlap: each counts in the sum, the span
        // covers both once.
        {"dgrad", 3000, 3500, 0, 7, 30},
        {"wgrad", 3200, 3900, 0, 9, 31},
        {"adam", 5000, 5250, 0, 7, 40},
        {"stray", 6000, 6010, 0, 7, 99},
    };
    log.copies = {{CopyActivity::Kind::Memset, 4096, 1700, 1750, 0, 7, 11},
                  {CopyActivity::Kind::HostToDevice, 1 << 20, 500, 900, 0, 7, 77}};
    log.memory = {{true, 0x1000, 2 << 20, 1001, 0, 20}, {false, 0x1000, 2 << 20, 5500, 0, 40}};
  }
};


}  // namespace headroom::testing
