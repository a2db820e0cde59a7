#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "core/cost_model.h"
#include "core/statistics.h"
#include "core/trace.h"
#include "trace_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

core::Trace committed(const std::string& name) {
  return core::read_trace_file(fs::path(HEADROOM_TRACES_DIR) / name);
}

TEST(CostModel, ExactAtSamplesInterpolatedBetween) {
  const core::Trace trace = committed("cpu-bert.json");
  const core::CostModel costs(trace);
  for (std::size_t k = 0; k < trace.batch_sizes.size(); ++k) {
    const std::int64_t b = trace.batch_sizes[k];
    // A trace with sequences charges a micro-batch what a later one in the step measured; one
    // without, the profiled step less its optimizer.
    const auto& step = trace.steps[k];
    EXPECT_EQ(costs.micro_batch_ns(b), step.sequence ? step.sequence->micro_batch_ns : step.step_ns - step.optimizer_ns);
    for (std::size_t i = 0; i < trace.layers.size(); ++i) {
      const auto& s = trace.layers[i].samples[k];
      const auto c = costs.layer(i, b);
      EXPECT_EQ(c.kept_bytes, s.kept_bytes) << trace.layers[i].name;
      EXPECT_EQ(c.fwd_ns, s.fwd_ns) << trace.layers[i].name;
    }
  }
  // Between two samples time is on the line between them; past the last it goes on along the line
  // through the last two.
  const std::size_t n = trace.batch_sizes.size();
  const std::int64_t b1 = trace.batch_sizes[n - 2], b2 = trace.batch_sizes[n - 1];
  const auto t1 = costs.micro_batch_ns(b1), t2 = costs.micro_batch_ns(b2);
  EXPECT_NEAR(costs.micro_batch_ns((b1 + b2) / 2), t1 + (t2 - t1) * ((b1 + b2) / 2 - b1) / (b2 - b1), 1);
  EXPECT_NEAR(costs.micro_batch_ns(2 * b2), t2 + std::max<std::int64_t>(0, t2 - t1) * b2 / (b2 - b1), 1);
}

// A trace whose steps were measured as sequences of micro-batches: a micro-batch costs what the
// later ones measured, and what a step pays once (optimizer, zeroing, the first micro-batch's
// extra) is charged through optimizer_ns, once per step.
TEST(CostModel, SequencesGiveMicroBatchTimeAndWhatAStepPaysOnce) {
  core::Trace trace = testing::make_small_trace();
  trace.steps[0].sequence = core::StepSequence{.micro_batch_ns = 7000, .first_micro_batch_ns = 7400, .zero_grad_ns = 30};
  trace.steps[1].sequence = core::StepSequence{.micro_batch_ns = 12000, .first_micro_batch_ns = 12400, .zero_grad_ns = 30};
  const core::CostModel costs(trace);
  EXPECT_EQ(costs.micro_batch_ns(1), 7000);
  EXPECT_EQ(costs.micro_batch_ns(2), 12000);
  EXPECT_EQ(costs.optimizer_ns(), 500 + 30 + 400);
  // Layer times (3000 ns per sample over the three layers) are scaled to the sequence's micro-batch.
  EXPECT_DOUBLE_EQ(costs.layer_time_scale(2), 12000.0 / (3 * 6000));

  // The same trace without sequences: the profiled step less its optimizer, and the optimizer alone.
  const core::Trace old = testing::make_small_trace();
  const core::CostModel old_costs(old);
  EXPECT_EQ(old_costs.micro_batch_ns(2), 15000 - 500);
  EXPECT_EQ(old_costs.optimizer_ns(), 500);
}

TEST(Statistics, MedianAveragesTheTwoMiddleValuesOfAnEvenCount) {
  EXPECT_EQ(core::median<std::int64_t>({5, 1, 3}), 3);
  EXPECT_EQ(core::median<std::int64_t>({4, 1, 3, 2}), 2);  // (2 + 3) / 2 in integer nanoseconds
  EXPECT_DOUBLE_EQ(core::median<double>({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(core::median<double>({7}), 7);
}

TEST(Statistics, RelativeErrorIsAgainstTheMeasuredValue) {
  EXPECT_DOUBLE_EQ(core::relative_error(110, 100), 0.1);
  EXPECT_DOUBLE_EQ(core::relative_error(90, 100), -0.1);  // signed: predicted too low
  EXPECT_DOUBLE_EQ(core::relative_error(100, 0), 0.0);  // nothing measured: no error invented
}

}  // namespace
}  // namespace headroom
