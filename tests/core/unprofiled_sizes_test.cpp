// execute's word on a peak that missed its prediction at micro-batch sizes the trace lacks: over by
// more than 1% (the bound between profiled sizes) or under at all (scratch memory that steps between
// them), with the command that profiles the sizes in; nothing at profiled sizes or on the mark. And
// plan's, before anything runs: how far its bound there lies above the line through the sizes
// around them.
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

TEST(UnprofiledSizes, SizesBetweenTheProfiledOnesAreListedOnceInOrder) {
  core::Trace trace;
  trace.batch_sizes = {1, 2, 4, 8, 16};
  EXPECT_EQ(core::sizes_between_profiled({11, 11, 10, 8, 3, 16, 20}, trace), (std::vector<std::int64_t>{3, 10, 11}));
  EXPECT_TRUE(core::sizes_between_profiled({16, 16}, trace).empty());
  trace.batch_sizes = {4, 8};  // below the smallest is not between
  EXPECT_EQ(core::sizes_between_profiled({2, 5}, trace), (std::vector<std::int64_t>{5}));
}

// cnn in bf16 at 2 x 11 + 1 x 10: 4,636,652 bytes predicted; a line 152 KiB under it (what ran
// there, 4,481,260 bytes; the line through 8 and 16 read 4,539,577).
TEST(UnprofiledSizes, APlanSaysHowFarItsBoundLiesAboveTheLine) {
  Case c = run_of({11, 11, 10}, 0, 0);
  c.plan.predicted.peak_bytes = 4'636'652;
  const std::string note = core::bound_between_sizes_note(c.plan, c.trace, 4'481'260).value_or("");
  EXPECT_NE(note.find("micro-batches of 10 and 11 were not profiled: the predicted peak is a bound there, 152 KiB (3.47%) above "
                      "the line"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("--batch-sizes 10,11 --add-to t.json -o t.json"), std::string::npos) << note;
  // Within 1% of the line, at profiled sizes, or with a micro-batch past the largest profiled size
  // (plan_warnings names that one): nothing.
  EXPECT_FALSE(core::bound_between_sizes_note(c.plan, c.trace, 4'600'000));
  c.plan.choice.micro_batches = {8, 8, 16};
  EXPECT_FALSE(core::bound_between_sizes_note(c.plan, c.trace, 4'481'260));
  c.plan.choice.micro_batches = {20, 12};
  EXPECT_FALSE(core::bound_between_sizes_note(c.plan, c.trace, 4'481'260));
}

}  // namespace
}  // namespace headroom
