#include "executor/step_wrappers.h"

#include "executor/data_parallel_step.h"

namespace headroom::executor {

std::span<const MakeStepWrapper> step_wrapper_makers() {
  static constexpr MakeStepWrapper kMakers[] = {
      join_data_parallel,
  };
  return kMakers;
}

std::vector<std::unique_ptr<StepWrapper>> make_step_wrappers(const core::Plan& plan, const ExecuteOptions& options,
                                                             torch::Device device, core::Report& report) {
  std::vector<std::unique_ptr<StepWrapper>> wrappers;
  for (const MakeStepWrapper make : step_wrapper_makers()) {
    if (auto wrapper = make(plan, options, device, report)) wrappers.push_back(std::move(wrapper));
  }
  return wrappers;
}

}  // namespace headroom::executor
