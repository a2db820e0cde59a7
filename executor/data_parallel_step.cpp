#include "executor/data_parallel_step.h"

#include <sched.h>

#include <cmath>
#include <numeric>

#include "core/collective.h"
#include "core/errors.h"
#include "core/sharding.h"
#include "core/statistics.h"
#include "executor/grad_cache.h"
#include "executor/step_loop.h"

namespace headroom::executor {

DataParallelStep::DataParallelStep(const WorkerIdentity& identity, torch::Device device, const core::StepChoice& choice)
    : workers_(identity, device),
      bucket_cap_bytes_(choice.data_parallel->bucket_cap_bytes),
      ring_loss_(choice.ring_loss),
      shard_stage_(choice.data_parallel->shard_stage),
      gather_(choice.data_parallel->gather) {}

std::unique_ptr<StepWrapper> join_data_parallel(const core::Plan& plan, const ExecuteOptions& options, torch::Device device,
                                                core::Report& report) {
  if (!plan.choice.data_parallel) return nullptr;
  progress(options, "joining " + std::to_string(options.workers) + " workers");
  auto step = std::make_unique<DataParallelStep>(WorkerIdentity{options.rank, options.workers, options.store}, device,
                                                 plan.choice);
  report.data_parallel = core::DataParallelReport{};
  report.data_parallel->world_size = options.workers;
  report.data_parallel->shard_stage = plan.choice.data_parallel->shard_stage;
  report.data_parallel->predicted_broadcast_seconds = plan.predicted_part(core::kParameterBroadcastSecondsPart).value_or(0);
  // What the worker measures of its reduces and gathers is how long it waits in them.
  report.data_parallel->predicted_gradient_reduce_seconds = plan.predicted_part(core::kExposedGradientReduceSecondsPart).value_or(0);
  report.data_parallel->predicted_gather_seconds = plan.predicted_part(core::kExposedParameterGatherSecondsPart).value_or(0);
  report.data_parallel->backend = step->backend();
  // Beside the plan's own figures (core/collective.h); a plan made before plans carried them has none.
  const auto allreduce = plan.predicted_part(core::kAllReduceSecondsPart);
  report.data_parallel->predicted_allreduce_seconds = allreduce.value_or(0);
  report.data_parallel->predicted_exposed_allreduce_seconds = plan.predicted_part(core::kExposedAllReduceSecondsPart).value_or(0);
  if (!allreduce) {
    report.warnings.push_back("the plan carries no prediction of its all-reduce (made by an older headroom): plan "
                              "again to compare it");
  }
  return step;
}

void DataParallelStep::attach(models::Model& model, core::Report& report) {
  // The parameters move into their flat buffers before the gradients' hooks are set on them.
  if (shard_stage_ > 0) sharded_ = std::make_unique<ShardedParameters>(model, workers_, shard_stage_, gather_);
  // Stage 2 reduces the gradients to their owners as backward makes them: nothing is all-reduced.
  if (shard_stage_ < 2) sync_ = std::make_unique<GradientSync>(model, workers_, bucket_cap_bytes_);
  if (ring_loss_) {
    ring_ = attach_ring(model, &workers_);
    if (!ring_) throw core::InputError("ring_loss: the plan runs a contrastive loss as a ring, but the model has none");
  } else if (contrastive_layer(model) >= 0) {
    // Each worker's loss over its own share alone is not the global batch's (planner::check_choice
    // refuses such a plan; a caller that skipped it is refused here).
    throw core::InputError("ring_loss: a data-parallel plan of a contrastive model must run its loss as Inf-CL's ring "
                           "across the workers, and this one does not: plan again");
  }
  report.data_parallel->buckets = sync_ ? static_cast<std::int64_t>(sync_->bucket_count()) : 0;
  report.data_parallel->bucket_bytes = sync_ ? sync_->buffer_bytes() : 0;
}

const std::vector<torch::Tensor>* DataParallelStep::optimizer_parameters() const {
  return sharded_ ? &sharded_->owned_pieces() : nullptr;
}

void DataParallelStep::start_step() {
  if (sharded_) sharded_->start_step();
}

void DataParallelStep::after_optimizer() {
  if (sharded_) last_broadcast_ = sharded_->broadcast();
}

void DataParallelStep::before_last_backward(const std::vector<torch::Tensor>& final_already) {
  if (sync_) sync_->arm(final_already);
}

void DataParallelStep::after_backward() {
  if (sync_) last_wait_ = sync_->finish();
  if (sharded_) {
    last_reduce_ = sharded_->finish_backward();
    last_reduces_started_ = sharded_->reduces_started();
    last_gather_ = sharded_->gather_seconds();
  }
}

void DataParallelStep::gather_for_check() {
  if (sharded_) sharded_->gather_for_check();
}

void DataParallelStep::after_check() {
  if (shard_stage_ >= 3) sharded_->release_all();
}

LayerParameterHooks* DataParallelStep::layer_hooks() { return shard_stage_ >= 3 ? sharded_.get() : nullptr; }

void DataParallelStep::after_step(const std::vector<torch::Tensor>& parameters, int step, bool measured, core::Report& report) {
  if (measured) {
    waits_.push_back(last_wait_);
    broadcasts_.push_back(last_broadcast_);
    reduces_.push_back(last_reduce_);
    gathers_.push_back(last_gather_);
  }
  // Every worker holds the same weights after every step, bit for bit (checked outside the clock;
  // at stage 3 as each unit's are gathered in turn).
  const std::string when = "after step " + std::to_string(step + 1);
  if (shard_stage_ >= 3) {
    workers_.check_digests_agree(sharded_->gathered_digest(), when);
  } else {
    workers_.check_weights_agree(parameters, when);
  }
  ++report.data_parallel->weight_checks;
}

void DataParallelStep::detach() {
  ring_.reset();
  sync_.reset();
  sharded_.reset();
}

void DataParallelStep::after_run(const core::Plan& plan, core::Report& report) {
  const auto share = plan.choice.worker_micro_batches(workers_.rank());
  const auto samples = static_cast<double>(std::accumulate(share.begin(), share.end(), std::int64_t{0}));
  const double step = report.step_seconds.empty() ? 0 : core::median(report.step_seconds);
  const double wait = waits_.empty() ? 0 : core::median(waits_);
  if (!broadcasts_.empty()) report.data_parallel->broadcast_seconds = core::median(broadcasts_);
  if (!reduces_.empty()) report.data_parallel->gradient_reduce_seconds = core::median(reduces_);
  report.data_parallel->gradient_reduces = last_reduces_started_;
  if (!gathers_.empty()) report.data_parallel->gather_seconds = core::median(gathers_);
  cpu_set_t allowed;
  const int cpus = ::sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : 0;
  const auto all =
      workers_.gather({samples, static_cast<double>(report.measured.peak_bytes), step, wait, static_cast<double>(cpus)});
  for (int r = 0; r < workers_.size(); ++r) {
    const auto& w = all[static_cast<std::size_t>(r)];
    report.data_parallel->workers.push_back({r, std::llround(w[0]), std::llround(w[1]), w[2], w[3], static_cast<int>(w[4])});
  }
  // Worker 0 compares the whole model with one process's after the run (the budget no longer holds).
  if (shard_stage_ >= 3) sharded_->gather_all();
}

}  // namespace headroom::executor
