#pragma once
// Executing an L2L plan (docs/design.md, "L2L"): the model built on the host, L2L
// (l2l_runner.h) running the plan's steps under its device budget. On the CPU the device side is
// what the budget allocator counts outside host scopes; the report's peak is that side's, and the
// host's bytes are reported beside it (runtime/budget_allocator.h). On CUDA the peak is what the
// caching allocator reported.
#include <torch/types.h>

#include "core/plan.h"
#include "core/report.h"
#include "core/trace.h"
#include "executor/executor.h"

namespace headroom::executor {

// Whether the plan is L2L's to run: it chose L2L (plan.choice.l2l).
bool l2l_takes(const core::Plan& plan);

// Runs the plan (l2l_takes) and fills `report`, which execute() started with the plan's
// side: the measured steps, the device peak, the gradient check, L2L's host bytes, or where
// the budget refused. `device` is options.device resolved (the CPU or CUDA). Throws InputError for
// options L2L does not run with (real data, a full-batch reference, the host limit) and for
// a model it cannot run.
void execute_l2l(const core::Plan& plan, const core::Trace& trace, const ExecuteOptions& options, torch::Device device,
                   core::Report& report);

}  // namespace headroom::executor
