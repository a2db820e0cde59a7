#pragma once
// `headroom execute` and `headroom demo` (they run libtorch). Each returns the process exit code.
#include <cstdint>
#include <string>

namespace headroom::cli {

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
};
int run_execute(const ExecuteArgs& args);

struct DemoArgs {
  std::string directory;  // where the trace, plans and reports go; a temporary one if empty
};
int run_demo(const DemoArgs& args);

}  // namespace headroom::cli
