#pragma once
// The techniques that run a plan's whole step their own way instead of the micro-batch step
// (executor.cpp): each says whether a plan is its to run and runs it under the one step loop
// (step_loop.h), filling the report execute() started. execute() hands a plan to the first that
// takes it. A new one is a line in whole_step_runners.cpp beside its own files.
#include <span>

#include <torch/types.h>

#include "core/plan.h"
#include "core/report.h"
#include "core/trace.h"
#include "executor/executor.h"

namespace headroom::executor {

struct WholeStepRunner {
  bool (*takes)(const core::Plan&);
  void (*run)(const core::Plan&, const core::Trace&, const ExecuteOptions&, torch::Device, core::Report&);
};

std::span<const WholeStepRunner> whole_step_runners();

// The runner that takes `plan`, or null: the micro-batch step runs it.
const WholeStepRunner* whole_step_runner(const core::Plan& plan);

}  // namespace headroom::executor
