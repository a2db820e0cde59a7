#pragma once
// Data parallel around a planned step: one worker's part in a plan for several
// (plan.choice.data_parallel), as a step wrapper (step_wrappers.h). The step itself runs the
// worker's share of the micro-batches (core::StepChoice::worker_micro_batches); this wraps it: the
// workers joined before the run's memory counts, the gradients exchanged in buckets during the last
// backward and written back before the optimizer, a contrastive loss run as Inf-CL's ring across
// the workers where the plan says so (choice.ring_loss), every worker's weights checked alike after
// every step, and every worker's figures gathered into rank 0's report.
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "core/plan.h"
#include "core/report.h"
#include "executor/data_parallel.h"
#include "executor/executor.h"
#include "executor/ring_peers.h"
#include "executor/step_wrappers.h"
#include "models/model.h"

namespace headroom::executor {

// Null where the plan runs on one worker. Otherwise joins the others (blocks until every rank has)
// and starts the report's data-parallel part beside the plan's predicted all-reduce.
std::unique_ptr<StepWrapper> join_data_parallel(const core::Plan& plan, const ExecuteOptions& options,
                                                torch::Device device, core::Report& report);

class DataParallelStep final : public StepWrapper {
 public:
  DataParallelStep(const WorkerIdentity& identity, torch::Device device, const core::StepChoice& choice);

  const std::string& backend() const { return workers_.backend(); }
  std::string phase() const override { return "all-reduce"; }
  // The gradients' buckets (their buffers count against the run's memory, as the plan counts them)
  // and, where the plan runs one, the contrastive loss's ring.
  void attach(models::Model& model, core::Report& report) override;
  // Sharded: this worker's range of the parameters.
  const std::vector<torch::Tensor>* optimizer_parameters() const override;
  void start_step() override;
  // Sharded: every worker's range broadcast from its owner.
  void after_optimizer() override;
  // Stages 2 and 3: every gradient from its owners for the gradient check, and at stage 3 every
  // unit's parameters (let go of after).
  void gather_for_check() override;
  void after_check() override;
  // Stage 3: the sharded parameters gather each unit's for its work.
  LayerParameterHooks* layer_hooks() override;
  bool builds_model_outside_budget() const override { return shard_stage_ >= 3; }
  // The last backward sends each bucket of gradients as it completes (GradientSync::arm).
  void before_last_backward(const std::vector<torch::Tensor>& final_already) override;
  // Waits for the exchange and writes the sums to the gradients.
  void after_backward() override;
  // The wait a measured step spent, and the weights checked alike (off the clock).
  void after_step(const std::vector<torch::Tensor>& parameters, int step, bool measured, core::Report& report) override;
  // Every worker's share, peak, median step and wait, in rank 0's report.
  void after_run(const core::Plan& plan, core::Report& report) override;
  void detach() override;

 private:
  Workers workers_;
  std::int64_t bucket_cap_bytes_;
  bool ring_loss_;
  int shard_stage_;
  core::GatherUnit gather_;
  std::unique_ptr<ShardedParameters> sharded_;  // stages 1 to 3
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<GroupRingPeers> ring_;
  double last_wait_ = 0;       // the last step's
  std::vector<double> waits_;  // the measured steps'
  double last_broadcast_ = 0;
  std::vector<double> broadcasts_;  // the measured steps'
  double last_reduce_ = 0;          // stage 2: the last step's gradient reduces
  std::int64_t last_reduces_started_ = 0;  // and the collectives they started
  std::vector<double> reduces_;
  double last_gather_ = 0;  // stage 3: the last step's parameter gathers
  std::vector<double> gathers_;
};

}  // namespace headroom::executor
