#pragma once
// Re-planning off the GUI thread. Every request gets a generation number; while one plan is being
// computed, newer requests coalesce into the latest one (the ones in between are never computed),
// and a result whose generation is older than the latest request is dropped, so what is shown is
// always for the controls as they are now and the window never waits for the planner.
#include <QObject>
#include <QThread>

#include <functional>
#include <memory>
#include <optional>

#include "gui/logic/plan_computation.h"

namespace headroom::gui {

struct PlanJob {
  quint64 generation = 0;
  std::shared_ptr<const TraceDocument> trace;
  PlanInputs inputs;
};

class PlanCoordinator : public QObject {
  Q_OBJECT

 public:
  // `compute` runs on the worker thread; tests pass one they can hold back.
  using Compute = std::function<PlanResult(const PlanJob&)>;
  explicit PlanCoordinator(Compute compute = default_compute(), QObject* parent = nullptr);
  ~PlanCoordinator() override;

  static Compute default_compute();

  // Returns the request's generation.
  quint64 request(std::shared_ptr<const TraceDocument> trace, const PlanInputs& inputs);

  quint64 latest_generation() const { return latest_; }
  bool busy() const { return running_; }
  int dropped() const { return dropped_; }

 signals:
  void planReady(quint64 generation, std::shared_ptr<const headroom::gui::PlanResult> result);
  void staleDropped(quint64 generation);

 private:
  void dispatch(PlanJob job);
  void finished(quint64 generation, std::shared_ptr<const PlanResult> result);

  Compute compute_;
  QThread thread_;
  QObject* worker_ = nullptr;  // lives on thread_; runs the jobs
  quint64 latest_ = 0;
  bool running_ = false;
  std::optional<PlanJob> pending_;
  int dropped_ = 0;
};

}  // namespace headroom::gui
