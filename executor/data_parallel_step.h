#pragma once
// Data parallel around a planned step: one worker's part in a plan for several
// (plan.choice.data_parallel). The step itself runs the worker's share of the micro-batches
// (core::StepChoice::worker_micro_batches); this wraps it: the workers joined before the run's
// memory counts, the gradients exchanged in buckets during the last backward and written back before
// the optimizer, a contrastive loss run as Inf-CL's ring across the workers, every worker's weights
// checked alike after every step, and every worker's figures gathered into rank 0's report.
#include <memory>
#include <vector>

#include <torch/types.h>

#include "core/plan.h"
#include "core/report.h"
#include "executor/data_parallel.h"
#include "executor/executor.h"
#include "executor/ring_peers.h"
#include "models/model.h"

namespace headroom::executor {

class DataParallelStep {
 public:
  // Null where the plan runs on one worker. Otherwise joins the others (blocks until every rank has)
  // and starts the report's data-parallel part beside the plan's predicted all-reduce.
  static std::unique_ptr<DataParallelStep> join(const core::Plan& plan, const ExecuteOptions& options,
                                                torch::Device device, core::Report& report);
  DataParallelStep(const DataParallelStep&) = delete;
  DataParallelStep& operator=(const DataParallelStep&) = delete;

  // The model the step trains: its gradients' buckets (their buffers count against the run's
  // memory, as the plan counts them) and, where the plan runs one (choice.ring_loss), its contrastive
  // loss's ring.
  void attach(models::Model& model, core::Report& report);
  int rank() const { return workers_.rank(); }
  bool runs_ring() const { return ring_ != nullptr; }

  // The next backward is the step's last: its gradients go out as they become ready
  // (GradientSync::arm).
  void arm(const std::vector<torch::Tensor>& final_already = {});
  // Waits for the exchange and writes the sums to the gradients.
  void finish();
  // After step `step`, off the clock: the wait a measured step spent, and the weights checked alike.
  void after_step(const std::vector<torch::Tensor>& parameters, int step, bool measured, core::Report& report);
  // After the last step: every worker's share, peak, median step and wait, in rank 0's report.
  void gather(const core::Plan& plan, core::Report& report);

 private:
  DataParallelStep(const WorkerIdentity& identity, torch::Device device, const core::StepChoice& choice);

  Workers workers_;
  std::int64_t bucket_cap_bytes_;
  bool ring_loss_;
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<GroupRingPeers> ring_;
  double last_wait_ = 0;       // the last step's
  std::vector<double> waits_;  // the measured steps'
};

}  // namespace headroom::executor
