#pragma once
// `headroom plan` and `headroom simulate`, torch-free. Each returns the process exit code.
#include <cstdint>
#include <string>

namespace headroom::cli {

struct PlanArgs {
  std::string trace;
  std::string budget;
  std::int64_t batch = 0;
  std::string strategies = "all";
  double margin = 0.05;
  std::string optimizer;  // empty: the trace's
  std::string output;
};
int run_plan(const PlanArgs& args);
// --strategies' help, from the planner's strategy table.
std::string strategies_help();

struct SimulateArgs {
  std::string plan;
  std::string output;
  std::string chrome;
};
int run_simulate(const SimulateArgs& args);

inline constexpr int kExitInfeasible = 3;

}  // namespace headroom::cli
