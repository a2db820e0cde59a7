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
  int devices = 1;          // data-parallel workers
  std::string link;         // "25GB/s,5us"; empty: the trace's measured link
  std::string bucket_cap;   // empty: 25 MiB
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
