#pragma once
// `headroom execute` and `headroom demo` (they run libtorch). Each returns the process exit code.
#include <cstdint>
#include <string>

namespace headroom::cli {

inline constexpr int kDevicesNotGiven = -2147483647 - 1;

struct ExecuteArgs {
  std::string plan;
  int steps = 3;
  int warmup = 1;
  std::string device = "cpu";
  bool no_budget = false;
  bool host_limit = false;
  std::string data = "synthetic";
  bool batchnorm_eval = false;
  std::string output;
  // Data parallel: start this many local workers (--devices), or be one worker of a group
  // launched by hand (--rank, --world-size, --store).
  int devices = kDevicesNotGiven;
  int rank = -1;
  int world_size = 0;
  std::string store;
  bool full_batch_reference = false;
  int threads = 0;          // 0: the plan's, as profiled
  bool no_rescale = false;  // keep the plan's predicted times where this machine's speed differs
};
int run_execute(const ExecuteArgs& args);

struct DemoArgs {
  std::string directory;  // where the trace, plans and reports go; a temporary one if empty
  std::string precision = "fp32";  // the step's (core/precision.h)
};
int run_demo(const DemoArgs& args);

}  // namespace headroom::cli
