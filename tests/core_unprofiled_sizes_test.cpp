// execute's word on a peak that missed its prediction at micro-batch sizes the trace lacks: over by
// more than 1% (the bound between profiled sizes) or under at all (scratch memory that steps between
// them), with the command that profiles the sizes in; nothing at profiled sizes or on the mark.
#include <gtest/gtest.h>

#include "core/unprofiled_sizes.h"

namespace headroom {
namespace {

struct Case {
  core::Plan plan;
  core::Trace trace;
  core::Report report;
};

Case run_of(std::vector<std::int64_t> micro_batches, std::int64_t predicted, std::int64_t measured) {
  Case c;
  c.trace.batch_sizes = {1, 2, 4, 8, 16};
  c.plan.choice.micro_batches = std::move(micro_batches);
  c.plan.trace_path = "t.json";
  c.report.status = "ok";
  c.report.predicted.peak_bytes = predicted;
  c.report.measured.peak_bytes = measured;
  return c;
}

std::string warning_of(const Case& c) { return core::unprofiled_sizes_warning(c.plan, c.trace, c.report).value_or(""); }

TEST(UnprofiledSizes, AnUnderPredictionAtUnprofiledSizesNamesThemAndTheCommand) {
  const std::string w = warning_of(run_of({5, 5, 5, 4}, 1'707'200, 1'709'376));
  EXPECT_NE(w.find("the prediction was 0.13% under the measured peak: micro-batches of 5 were not profiled"), std::string::npos)
      << w;
  EXPECT_NE(w.find("--batch-sizes 5 --add-to t.json -o t.json"), std::string::npos) << w;
}

TEST(UnprofiledSizes, AnOverPredictionPastOnePercentNamesEachSize) {
  const std::string w = warning_of(run_of({11, 11, 10}, 4'636'652, 4'481'260));
  EXPECT_NE(w.find("the prediction was 3.47% over the measured peak: micro-batches of 10 and 11 were not profiled"),
            std::string::npos)
      << w;
  EXPECT_NE(w.find("--batch-sizes 10,11 --add-to"), std::string::npos) << w;
}

TEST(UnprofiledSizes, NothingOnTheMarkWithinOnePercentOrAtProfiledSizes) {
  EXPECT_EQ(warning_of(run_of({5, 5}, 1000, 1000)), "");
  EXPECT_EQ(warning_of(run_of({5, 5}, 1009, 1000)), "");
  EXPECT_EQ(warning_of(run_of({8, 8}, 900, 1000)), "");
  // Past the largest profiled size the times and bytes are extrapolated, which plan already says.
  EXPECT_EQ(warning_of(run_of({20}, 900, 1000)), "");
  Case failed = run_of({5}, 900, 1000);
  failed.report.status = "out_of_memory";
  EXPECT_EQ(warning_of(failed), "");
}

}  // namespace
}  // namespace headroom
