// The all-reduce's gradient buckets (core/collective.h, planner/data_parallel_model.h): whole layers
// from the last one, in the bytes the collective sends.
#include <gtest/gtest.h>

#include "core/collective.h"
#include "core/cost_model.h"
#include "core/trace.h"
#include "planner/data_parallel_model.h"
#include "support/plan_requests.h"

namespace headroom {
namespace {

using testing::committed;

TEST(GradientBuckets, WholeLayersFromTheLastOne) {
  // Layer 2 has no parameters; buckets close once they reach 100 bytes.
  const auto buckets = core::gradient_buckets({40, 80, 0, 30, 90, 10}, 100);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0], (core::GradientBucket{4, 5, 100}));
  EXPECT_EQ(buckets[1], (core::GradientBucket{1, 3, 110}));
  EXPECT_EQ(buckets[2], (core::GradientBucket{0, 0, 40}));
  EXPECT_EQ(core::gradient_buckets({0, 0}, 100).size(), 0u);
}

// A bf16 step's bfloat16 gradients go as float32 over Gloo (the CPU), as they are over NCCL, and
// every other precision's are float32 already; the planner's buckets follow, so the bf16 mlp's
// buckets on the CPU hold twice its parameters' bytes and group by those bytes.
TEST(GradientBuckets, Bf16GradientsWidenToFloat32OverGlooOnly) {
  EXPECT_EQ(core::allreduce_gradient_bytes(1000, core::Precision::Bf16, false), 2000);
  EXPECT_EQ(core::allreduce_gradient_bytes(1000, core::Precision::Bf16, true), 1000);
  EXPECT_EQ(core::allreduce_gradient_bytes(1000, core::Precision::Bf16Autocast, false), 1000);
  EXPECT_EQ(core::allreduce_gradient_bytes(1000, core::Precision::Fp32, false), 1000);
  core::Trace trace = committed("cpu-mlp.json");
  trace.precision = core::Precision::Bf16;
  std::int64_t parameter_bytes = 0;
  std::vector<std::int64_t> widened;
  for (const auto& layer : trace.layers) {
    parameter_bytes += layer.param_bytes;
    widened.push_back(2 * layer.param_bytes);
  }
  core::StepChoice choice = core::StepChoice{}.with_micro_batches({8});
  choice.data_parallel = core::DataParallelChoice{2, {}, core::parse_link("1GB/s,20us"), parameter_bytes / 3};
  const core::CostModel costs(trace);
  const auto buckets = planner::plan_buckets(costs, choice);
  EXPECT_EQ(buckets, core::gradient_buckets(widened, parameter_bytes / 3));
  EXPECT_EQ(planner::bucket_buffer_bytes(costs, choice), 2 * parameter_bytes);
}

}  // namespace
}  // namespace headroom
