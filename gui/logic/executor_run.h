#pragma once
// Running a plan with `headroom execute` as a child process: the GUI never links libtorch. The
// child's progress lines ("executing: step 2/3") drive a progress bar, cancel kills it, and its
// report is read back for predicted against measured.
#include <QObject>
#include <QProcess>
#include <QString>

#include <optional>

#include "core/report.h"

namespace headroom::gui {

// The `headroom` command beside this program (one build directory), else on PATH; empty if neither.
QString find_headroom_executable(const QString& application_dir);

struct ExecutorProgress {
  int done = 0;   // phases finished
  int total = 0;  // gradient check, warm-up steps and measured steps
  QString what;
};
// One line of `headroom execute`'s stderr, or nothing if it is not a progress line.
std::optional<ExecutorProgress> parse_executor_progress(const QString& line, int warmup_steps, int steps);

struct ExecutorOutcome {
  enum class Status { Ok, OutOfMemory, Failed, Cancelled };
  Status status = Status::Failed;
  std::optional<core::Report> report;  // Ok and OutOfMemory
  QString message;                     // Failed: the child's error line, or why it did not start
};

class ExecutorRun : public QObject {
  Q_OBJECT

 public:
  explicit ExecutorRun(QObject* parent = nullptr);
  ~ExecutorRun() override;

  // Runs `program execute plan -o report --steps N --warmup W`.
  // `devices` above 1: a data-parallel plan's local worker processes (`execute --devices N`).
  void start(const QString& program, const QString& plan_path, const QString& report_path, int steps, int warmup_steps,
             int devices = 1);
  void cancel();
  bool running() const { return process_.state() != QProcess::NotRunning; }

 signals:
  void progress(const headroom::gui::ExecutorProgress& progress);
  void finished(const headroom::gui::ExecutorOutcome& outcome);

 private:
  void read_progress();
  void process_finished(int exit_code, QProcess::ExitStatus status);
  void fail(const QString& message);

  QProcess process_;
  QString report_path_;
  QString stderr_tail_;
  QByteArray partial_line_;
  int steps_ = 0, warmup_ = 0;
  bool cancelled_ = false;
  bool done_ = true;
};

}  // namespace headroom::gui
