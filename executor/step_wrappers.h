#pragma once
// What a technique adds around the micro-batch step (executor.cpp) without running the step its own
// way (whole_step_runners.h): made once from the plan before the run's memory counts, attached to
// the model as it is built, and called where the step arms its last backward, where its gradients
// are complete, before the optimizer and after every step, and once after the last. Data parallel
// is one (data_parallel_step.h: it joins the workers, exchanges the gradients, runs the ring and
// checks the weights). A new one is a line in step_wrappers.cpp beside its own files.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <torch/types.h>

#include "core/plan.h"
#include "core/report.h"
#include "executor/executor.h"
#include "executor/plan_runner.h"
#include "models/model.h"

namespace headroom::executor {

class StepWrapper {
 public:
  virtual ~StepWrapper() = default;
  // The phase an out-of-memory report names while after_backward runs ("all-reduce").
  virtual std::string phase() const = 0;
  // The model the step trains, as it is built under the run's memory (what this allocates counts).
  virtual void attach(models::Model&, core::Report&) {}
  // What the optimizer steps, where not the model's trainable parameters (null): a sharded worker's
  // range of them. Asked once, after attach.
  virtual const std::vector<torch::Tensor>* optimizer_parameters() const { return nullptr; }
  // A training step begins (on the clock, before its first micro-batch).
  virtual void start_step() {}
  // The next backward is the step's last. `final_already`: parameters whose gradient is complete
  // before it and that it does not reach (a gradient-cache step's loss layer).
  virtual void before_last_backward(const std::vector<torch::Tensor>& /*final_already*/) {}
  // Every micro-batch's backward has run: what makes the accumulated gradients the step's (data
  // parallel: the exchange). The gradient check runs it too.
  virtual void after_backward() {}
  // What changes the gradients for the update only, right before the optimizer steps (not in the
  // gradient check, which compares the step's gradients with the full batch's).
  virtual void before_optimizer(const std::vector<torch::Tensor>& /*parameters*/) {}
  // The optimizer has stepped (on the clock): a sharded worker sends the parameters it stepped.
  virtual void after_optimizer() {}
  // The gradient check reads every parameter's whole gradient after after_backward, and worker 0
  // runs the full batch on the whole model (off the clock, outside the budget): a worker that keeps
  // only its range of them gathers them; after_check lets go of them again.
  virtual void gather_for_check() {}
  virtual void after_check() {}
  // What the runner calls around each layer's work, where the wrapper keeps the layers' parameters
  // elsewhere between uses (a stage-3 worker); null otherwise. Asked once, after attach.
  virtual LayerParameterHooks* layer_hooks() { return nullptr; }
  // Whether attach takes the model's parameters apart, so that the model is built whole outside the
  // budget first (as FSDP builds it on the host): the planned state is what the worker keeps after.
  virtual bool builds_model_outside_budget() const { return false; }
  // After step `step`, off the clock.
  virtual void after_step(const std::vector<torch::Tensor>& /*parameters*/, int /*step*/, bool /*measured*/,
                          core::Report&) {}
  // After the last step.
  virtual void after_run(const core::Plan&, core::Report&) {}
  // The model is about to go: let go of what holds on to it (its parameters, hooks on its gradients),
  // so it is freed with it as the run ends.
  virtual void detach() {}
};

// Makes a technique's wrapper for `plan`, or null where the plan does not use it.
using MakeStepWrapper = std::unique_ptr<StepWrapper> (*)(const core::Plan&, const ExecuteOptions&, torch::Device,
                                                         core::Report&);
std::span<const MakeStepWrapper> step_wrapper_makers();

// Every wrapper `plan` uses, in the table's order.
std::vector<std::unique_ptr<StepWrapper>> make_step_wrappers(const core::Plan& plan, const ExecuteOptions& options,
                                                             torch::Device device, core::Report& report);

}  // namespace headroom::executor
