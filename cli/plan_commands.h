#pragma once
// `headroom plan` and `headroom simulate`, torch-free. Each returns the process exit code.
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/plan.h"
#include "core/trace.h"
#include "runtime/calibration_cache.h"

namespace headroom::cli {

struct PlanArgs {
  std::string trace;
  std::string budget;
  std::int64_t batch = 0;
  std::string strategies = "all";
  double margin = 0.05;
  std::string optimizer;  // empty: the trace's
  std::optional<double> momentum;  // --momentum, with optimizer sgd
  bool amsgrad = false;            // --amsgrad, with optimizer adam or adamw
  std::string output;
  int devices = 1;          // data-parallel workers
  std::string link;         // "25GB/s,5us"; empty: the trace's measured link
  std::string bucket_cap;   // empty: 25 MiB
  std::string shard;        // ZeRO's stage, "0", "1" or "auto"; empty: not given (auto)
  std::string gather;       // stage 3's unit, "block", "layer" or "auto"; empty: not given (auto)
  bool no_rescale = false;  // keep the trace's times where this machine's speed differs
  std::string precision;    // which of the trace's precisions the plan is for; empty: the trace's own
  // Times this machine for the trace (cli/calibration_child.h, given by main); unset: no comparison.
  std::function<runtime::MachineTiming(const core::Trace&)> calibrate_here;
};
// A plan and what `headroom plan` prints about it: the summary, then (computed when called: a
// precision comparison plans again) what its techniques add and the other precisions' plans.
struct PlanMade {
  core::Plan plan;
  std::string summary;
  std::function<std::string()> after_summary;
};
// No plan fits: what() is the reason, one line ("infeasible: no plan fits ..., so the budget must be
// at least ...").
class Infeasible : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Plans as `headroom plan` does, writing nothing; throws core::InputError for bad input, Infeasible.
PlanMade make_plan(const PlanArgs& args);
int run_plan(const PlanArgs& args);
// --strategies' help, from the planner's strategy table.
std::string strategies_help();

struct SimulateArgs {
  std::string plan;
  bool no_rescale = false;
  std::function<runtime::MachineTiming(const core::Trace&)> calibrate_here;
  std::string output;
  std::string chrome;
};
int run_simulate(const SimulateArgs& args);

inline constexpr int kExitInfeasible = 3;

}  // namespace headroom::cli
