#include "executor/whole_step_runners.h"

#include "executor/l2l_execute.h"

namespace headroom::executor {

std::span<const WholeStepRunner> whole_step_runners() {
  static constexpr WholeStepRunner kRunners[] = {
      {l2l_takes, execute_l2l},  // L2L
  };
  return kRunners;
}

const WholeStepRunner* whole_step_runner(const core::Plan& plan) {
  for (const WholeStepRunner& runner : whole_step_runners()) {
    if (runner.takes(plan)) return &runner;
  }
  return nullptr;
}

}  // namespace headroom::executor
