#include "gui/logic/plan_coordinator.h"

namespace headroom::gui {

PlanCoordinator::PlanCoordinator(Compute compute, QObject* parent) : QObject(parent), compute_(std::move(compute)) {
  thread_.setObjectName("headroom-planner");
  worker_ = new QObject;
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  thread_.start();
}

PlanCoordinator::~PlanCoordinator() {
  thread_.quit();
  thread_.wait();
}

PlanCoordinator::Compute PlanCoordinator::default_compute() {
  return [](const PlanJob& job) { return compute_plan(*job.trace, job.inputs); };
}

quint64 PlanCoordinator::request(std::shared_ptr<const TraceDocument> trace, const PlanInputs& inputs) {
  PlanJob job{++latest_, std::move(trace), inputs};
  if (running_) {
    pending_ = std::move(job);
  } else {
    dispatch(std::move(job));
  }
  return latest_;
}

void PlanCoordinator::dispatch(PlanJob job) {
  running_ = true;
  QMetaObject::invokeMethod(
      worker_,
      [this, job = std::move(job), compute = compute_] {
        PlanResult computed;
        try {
          computed = compute(job);
        } catch (const std::exception& e) {
          computed.inputs = job.inputs;
          computed.error = e.what();
          computed.summary = std::string("cannot plan: ") + e.what() + "\n";
        }
        auto result = std::make_shared<const PlanResult>(std::move(computed));
        // Back on the coordinator's thread; if the coordinator is gone by then, Qt drops the call.
        QMetaObject::invokeMethod(
            this, [this, generation = job.generation, result] { finished(generation, result); }, Qt::QueuedConnection);
      },
      Qt::QueuedConnection);
}

void PlanCoordinator::finished(quint64 generation, std::shared_ptr<const PlanResult> result) {
  running_ = false;
  if (generation < latest_) {
    ++dropped_;
    emit staleDropped(generation);
  } else {
    emit planReady(generation, std::move(result));
  }
  if (pending_) {
    PlanJob next = std::move(*pending_);
    pending_.reset();
    dispatch(std::move(next));
  }
}

}  // namespace headroom::gui
