#pragma once
// A plan executed for two steps under its budget: within it, the peak predicted at or above what
// runs and within 1% of it, and the gradients the full batch's to `gradient_tolerance`.
#include <gtest/gtest.h>

#include "core/plan.h"
#include "core/report.h"
#include "core/trace.h"
#include "executor/executor.h"

namespace headroom::testing {

// The run and its memory checks; the gradient check is the caller's to judge.
inline core::Report run_within_predicted_peak(const core::Plan& plan, const core::Trace& trace) {
  executor::ExecuteOptions run;
  run.steps = 2;
  const core::Report report = executor::execute(plan, trace, "p.json", run);
  EXPECT_EQ(report.status, "ok");
  EXPECT_LE(report.measured.peak_bytes, plan.budget_bytes);
  EXPECT_GE(report.predicted.peak_bytes, report.measured.peak_bytes);
  EXPECT_LE(static_cast<double>(report.predicted.peak_bytes), 1.01 * static_cast<double>(report.measured.peak_bytes));
  EXPECT_TRUE(report.gradient_check.computed);
  return report;
}

inline void expect_runs_as_predicted(const core::Plan& plan, const core::Trace& trace, double gradient_tolerance) {
  const core::Report report = run_within_predicted_peak(plan, trace);
  if (report.gradient_check.computed) {
    EXPECT_LT(report.gradient_check.max_rel_diff, gradient_tolerance);
  }
}

}  // namespace headroom::testing
