#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "core/cost_model.h"
#include "core/trace.h"
#include "core/transient_jumps.h"
#include "support/trace_fixture.h"

namespace headroom {
namespace {

// oneDNN's bfloat16 convolution backward at two threads (the cnn's stage2.block0.conv2): 18,816
// bytes a sample, and 155,392 more from 12 samples on. Profiled at 1, 2, 4, ..., 32, the step hides
// in the segment from 8 to 16, where the bound holds it from 9 on (a plan of 3 x 11 came out 3.5%
// over). Halving the segments whose jump is worth locating finds it: 12, then 10, then 11; then the
// line is exact on both sides and the bound adds nothing.
TEST(TransientJumps, AStepBetweenProfiledSizesIsFoundByHalvingItsSegment) {
  const auto conv = [](std::int64_t b) { return 272900 + 18816 * (b - 1) + (b >= 12 ? 155392 : 0); };
  core::Trace trace = testing::make_small_trace();
  std::vector<std::int64_t> sizes{1, 2, 4, 8, 16, 32};
  const auto profile = [&] {
    testing::resample(trace, sizes, [&](const core::LayerProfile& layer, std::size_t, core::LayerSample& s) {
      s.fwd_transient_bytes *= s.batch;
      s.bwd_transient_bytes = layer.name == "fc" ? conv(s.batch) : s.bwd_transient_bytes * s.batch;
    });
    for (auto& step : trace.steps) step.peak_bytes = 1200000 + 268136 * step.batch;
  };
  profile();
  const auto jumps = core::transient_jumps(trace);
  ASSERT_EQ(jumps.size(), 1u);
  EXPECT_EQ(jumps[0].from_batch, 8);
  EXPECT_EQ(jumps[0].to_batch, 16);
  EXPECT_EQ(jumps[0].bytes, 155392);
  EXPECT_EQ(jumps[0].layer, "fc");
  EXPECT_EQ(jumps[0].what, "backward scratch");
  // A jump under the share of the step's peak asked for, or no sizes allowed: nothing to locate.
  EXPECT_TRUE(core::jumps_worth_locating(trace, 0.05, 4).empty());
  EXPECT_TRUE(core::jumps_worth_locating(trace, 0.005, 0).empty());

  std::vector<std::int64_t> located;
  for (int round = 0; round < 6; ++round) {
    std::vector<std::int64_t> more;
    for (const auto& jump : core::jumps_worth_locating(trace, 0.005, 4)) more.push_back(jump.middle());
    if (more.empty()) break;
    located.insert(located.end(), more.begin(), more.end());
    sizes.insert(sizes.end(), more.begin(), more.end());
    std::sort(sizes.begin(), sizes.end());
    profile();
  }
  EXPECT_EQ(located, (std::vector<std::int64_t>{12, 10, 11}));
  EXPECT_TRUE(core::transient_jumps(trace).empty());
  const core::CostModel costs(trace);
  for (std::int64_t b = 1; b <= 32; ++b) EXPECT_EQ(costs.layer(0, b).bwd_transient_bytes, conv(b)) << b;
}

// Nothing to locate where every transient is a line, where one grows ever faster (a standard
// contrastive loss's B x B logits: each segment steeper than the last, no step to find), or where
// the steeper segment is the last (nothing after it to tell a step from a bend).
TEST(TransientJumps, NoneForLinesCurvesOrTheLastSegment) {
  core::Trace trace = testing::make_small_trace();
  for (const auto& bwd : std::vector<std::function<std::int64_t(std::int64_t)>>{
           [](std::int64_t b) { return 1000 * b; }, [](std::int64_t b) { return 64 * b * b; },
           [](std::int64_t b) { return 1000 * b + (b > 16 ? 50000 : 0); }}) {
    testing::resample(trace, {1, 2, 4, 8, 16, 32}, [&](const core::LayerProfile&, std::size_t, core::LayerSample& s) {
      s.fwd_transient_bytes *= s.batch;
      s.bwd_transient_bytes = bwd(s.batch);
    });
    EXPECT_TRUE(core::transient_jumps(trace).empty());
    EXPECT_TRUE(core::jumps_worth_locating(trace, 0.0, 8).empty());
  }
}

}  // namespace
}  // namespace headroom
