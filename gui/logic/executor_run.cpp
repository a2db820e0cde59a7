#include "gui/logic/executor_run.h"

#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>
#include <QStandardPaths>

namespace headroom::gui {

QString find_headroom_executable(const QString& application_dir) {
  const QFileInfo beside(QDir(application_dir).filePath(QStringLiteral("headroom")));
  if (beside.isFile() && beside.isExecutable()) return beside.absoluteFilePath();
  return QStandardPaths::findExecutable(QStringLiteral("headroom"));
}

std::optional<ExecutorProgress> parse_executor_progress(const QString& line, int warmup_steps, int steps) {
  static const QRegularExpression pattern(QStringLiteral(R"(^executing:\s*(.*?)\s*$)"));
  static const QRegularExpression counted(QStringLiteral(R"(^(warm-up|step) (\d+)/(\d+)$)"));
  const auto match = pattern.match(line);
  if (!match.hasMatch()) return std::nullopt;
  ExecutorProgress p;
  p.what = match.captured(1);
  p.total = 1 + warmup_steps + steps;
  if (p.what == QLatin1String("gradient check") || p.what == QLatin1String("calibration before")) {
    p.done = 0;
  } else if (p.what == QLatin1String("calibration after")) {
    p.done = p.total;  // timing the machine again once every step has run
  } else if (const auto c = counted.match(p.what); c.hasMatch()) {
    // "step 2/3" starts the second measured step: the gradient check, the warm-up and one step are done.
    const int k = c.captured(2).toInt();
    p.done = c.captured(1) == QLatin1String("warm-up") ? 1 + (k - 1) : 1 + warmup_steps + (k - 1);
  } else {
    p.done = 0;
  }
  return p;
}

ExecutorRun::ExecutorRun(QObject* parent) : QObject(parent) {
  connect(&process_, &QProcess::readyReadStandardError, this, &ExecutorRun::read_progress);
  connect(&process_, &QProcess::finished, this, &ExecutorRun::process_finished);
  connect(&process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
    if (error == QProcess::FailedToStart) fail(QStringLiteral("could not start %1: %2").arg(process_.program(), process_.errorString()));
  });
}

ExecutorRun::~ExecutorRun() {
  if (running()) {
    process_.kill();
    process_.waitForFinished(5000);
  }
}

void ExecutorRun::start(const QString& program, const QString& plan_path, const QString& report_path, int steps,
                        int warmup_steps, int devices) {
  report_path_ = report_path;
  steps_ = steps;
  warmup_ = warmup_steps;
  cancelled_ = false;
  done_ = false;
  stderr_tail_.clear();
  partial_line_.clear();
  QFile::remove(report_path);
  QStringList arguments{QStringLiteral("execute"), plan_path, QStringLiteral("-o"), report_path, QStringLiteral("--steps"),
                        QString::number(steps), QStringLiteral("--warmup"), QString::number(warmup_steps)};
  if (devices > 1) arguments << QStringLiteral("--devices") << QString::number(devices);
  process_.start(program, arguments);
}

void ExecutorRun::cancel() {
  if (!running()) return;
  cancelled_ = true;
  process_.kill();
}

void ExecutorRun::read_progress() {
  partial_line_ += process_.readAllStandardError();
  // Progress on a terminal rewrites one line with \r; as a child it prints a line per phase.
  partial_line_.replace('\r', '\n');
  qsizetype end;
  while ((end = partial_line_.indexOf('\n')) >= 0) {
    const QString line = QString::fromUtf8(partial_line_.left(end)).trimmed();
    partial_line_.remove(0, end + 1);
    if (line.isEmpty()) continue;
    if (const auto p = parse_executor_progress(line, warmup_, steps_)) {
      emit progress(*p);
    } else {
      stderr_tail_ = line;
    }
  }
}

void ExecutorRun::fail(const QString& message) {
  if (done_) return;
  done_ = true;
  ExecutorOutcome outcome;
  outcome.status = ExecutorOutcome::Status::Failed;
  outcome.message = message;
  emit finished(outcome);
}

void ExecutorRun::process_finished(int exit_code, QProcess::ExitStatus status) {
  if (done_) return;
  read_progress();
  if (!partial_line_.isEmpty()) stderr_tail_ = QString::fromUtf8(partial_line_).trimmed();
  ExecutorOutcome outcome;
  if (cancelled_) {
    done_ = true;
    outcome.status = ExecutorOutcome::Status::Cancelled;
    outcome.message = QStringLiteral("cancelled");
    emit finished(outcome);
    return;
  }
  if (status == QProcess::NormalExit && (exit_code == 0 || exit_code == 1) && QFileInfo::exists(report_path_)) {
    // Only the read is guarded: an exception from a receiver of `finished` is not a bad report.
    try {
      outcome.report = core::read_report_file(report_path_.toStdString());
    } catch (const std::exception& e) {
      fail(QString::fromUtf8(e.what()));
      return;
    }
    outcome.status = outcome.report->status == "ok" ? ExecutorOutcome::Status::Ok : ExecutorOutcome::Status::OutOfMemory;
    outcome.message = stderr_tail_;
    done_ = true;
    emit finished(outcome);
    return;
  }
  fail(stderr_tail_.isEmpty() ? QStringLiteral("headroom execute exited with code %1").arg(exit_code)
                              : stderr_tail_.startsWith(QLatin1String("headroom: ")) ? stderr_tail_.mid(10) : stderr_tail_);
}

}  // namespace headroom::gui
