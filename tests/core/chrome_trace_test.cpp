#include <gtest/gtest.h>

#include "core/chrome_trace.h"
#include "core/errors.h"
#include "core/trace.h"
#include "support/trace_fixture.h"

namespace headroom {
namespace {

using core::InputError;
using nlohmann::json;

TEST(ChromeTrace, ProfileTimelineHasEveryLayerTwiceAndMemoryReturnsToBase) {
  const core::Trace trace = testing::make_small_trace();
  const json timeline = core::profile_step_timeline(trace, 2);
  int forward = 0, backward = 0, optimizer = 0;
  std::int64_t last_memory = -1, end_ts_us = 0;
  for (const auto& e : timeline["traceEvents"]) {
    if (e["ph"] == "X") {
      forward += e["cat"] == "forward";
      backward += e["cat"] == "backward";
      optimizer += e["cat"] == "optimizer";
    }
    if (e["ph"] == "C") last_memory = e["args"]["allocated_bytes"].get<std::int64_t>();
    if (e["ph"] == "X") end_ts_us = static_cast<std::int64_t>(e["ts"].get<double>() + e["dur"].get<double>());
  }
  EXPECT_EQ(forward, 3);
  EXPECT_EQ(backward, 3);
  EXPECT_EQ(optimizer, 1);
  EXPECT_EQ(last_memory, trace.steps[1].static_bytes + trace.steps[1].input_bytes);
  // forward 2+2+2 us, backward 4+4+4 us, optimizer 0.5 us at batch 2
  EXPECT_EQ(end_ts_us, 18);
  EXPECT_THROW(core::profile_step_timeline(trace, 3), InputError);
}

}  // namespace
}  // namespace headroom
