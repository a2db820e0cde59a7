#pragma once
// `headroom execute --devices N`: starts N worker processes of this same binary on this machine
// (each `execute --rank R --world-size N --store file:...`), forwards worker 0's progress, and
// waits. The first worker to fail stops the others; the command then names that worker's rank and
// reason. Only when every worker succeeds is the report (worker 0's, written to a private temporary
// directory) put in place, so no failed run leaves an output behind.
#include <string>
#include <vector>

namespace headroom::cli {

struct WorkerLaunch {
  int workers = 1;
  // Each worker's arguments after the executable, less --rank, --world-size, --store and the report.
  std::vector<std::string> arguments;
  std::string output;  // the report's final path; empty for none
};

// The exit code: 0 when every worker succeeded, else 1 (a worker failed; the error names it).
int launch_workers(const WorkerLaunch& launch);

// Each worker's CPUs: `allowed` (the launcher's, in order) split into `workers` runs of equal length,
// the rest left over; every list empty (no worker bound) where there are fewer CPUs than workers. Workers
// sharing cores with each other's compute wait in every collective for a thread the other's
// compute holds (docs/results.md, "Workers bound to their cores").
std::vector<std::vector<int>> worker_cpus(const std::vector<int>& allowed, int workers);

}  // namespace headroom::cli
