#pragma once
// Runs the current plan with `headroom execute` in a child process: progress, cancel, and then
// predicted against measured side by side.
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QWidget>

#include <optional>

#include "core/plan.h"
#include "gui/logic/executor_run.h"

namespace headroom::gui {

class RunPanel : public QWidget {
  Q_OBJECT
 public:
  explicit RunPanel(QWidget* parent = nullptr);

  void set_plan(const std::optional<core::Plan>& plan);
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

 signals:
  void error(const QString& title, const QString& message);
  void runFinished();

 private:
  void show_progress(const ExecutorProgress& p);
  void show_outcome(const ExecutorOutcome& outcome);

  ExecutorRun run_;
  QTemporaryDir directory_;
  QString program_;
  std::optional<core::Plan> plan_;
  std::optional<ExecutorOutcome> last_;
  QSpinBox* steps_;
  QPushButton* run_button_;
  QPushButton* cancel_button_;
  QProgressBar* progress_;
  QLabel* status_;
  QTableWidget* table_;
};

}  // namespace headroom::gui
