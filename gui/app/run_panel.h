#pragma once
// Runs the current plan with `headroom execute` in a child process: progress, cancel, and then
// predicted against measured side by side. Results outlive the plan they measured only greyed and
// labelled with that plan's budget and batch, so they are never read as the current plan's.
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QWidget>

#include <memory>
#include <optional>

#include "core/plan.h"
#include "gui/logic/executor_run.h"
#include "gui/logic/trace_document.h"

namespace headroom::gui {

class RunPanel : public QWidget {
  Q_OBJECT
 public:
  explicit RunPanel(QWidget* parent = nullptr);

  void set_plan(const std::optional<core::Plan>& plan);
  // The trace the plans are of: a plan is written for `headroom execute` as it leaves the app
  // (plan_as_written).
  void set_trace(std::shared_ptr<const TraceDocument> trace) { trace_ = std::move(trace); }
  // Forgets the results (another trace: they belong to another model).
  void clear_results();
  // `headroom execute` can run the trace's plans: not an eager capture's, which has no file to build
  // the module from (they run in the user's loop, headroom.apply).
  bool executable() const;
  // Where `headroom` is; empty: not found (Run then says so).
  void set_program(const QString& program) { program_ = program; }

  void run();
  void cancel() { run_.cancel(); }
  bool running() const { return run_.running(); }

  QPushButton* run_button() const { return run_button_; }
  QPushButton* cancel_button() const { return cancel_button_; }
  QProgressBar* progress_bar() const { return progress_; }
  QTableWidget* comparison() const { return table_; }
  QSpinBox* steps() const { return steps_; }
  const std::optional<ExecutorOutcome>& last_outcome() const { return last_; }
  // Results are shown for a plan other than the current one.
  bool results_stale() const { return shown_plan_.has_value() && shown_plan_ != plan_; }
  QLabel* stale_label() const { return stale_; }
  QLabel* status_label() const { return status_; }

 signals:
  void error(const QString& title, const QString& message);
  void runFinished();

 private:
  void show_progress(const ExecutorProgress& p);
  void show_outcome(const ExecutorOutcome& outcome);
  void show_staleness();

  ExecutorRun run_;
  QTemporaryDir directory_;
  QString program_;
  std::shared_ptr<const TraceDocument> trace_;
  std::optional<core::Plan> plan_;
  std::optional<core::Plan> running_plan_;
  std::optional<core::Plan> shown_plan_;  // the plan the table's results are for
  std::optional<ExecutorOutcome> last_;
  QSpinBox* steps_;
  QPushButton* run_button_;
  QPushButton* cancel_button_;
  QProgressBar* progress_;
  QLabel* status_;
  QLabel* stale_;
  QTableWidget* table_;
};

}  // namespace headroom::gui
