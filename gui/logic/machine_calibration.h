#pragma once
// Timing this machine for an opened trace with `headroom calibrate` as a child process (the GUI
// never links libtorch), so the desktop app compares machines as the plan command does: where this
// one runs the calibration's kernels at another speed than the trace's, its times are rescaled to
// it (core/rescale.h) and the app says so.
#include <QObject>
#include <QProcess>
#include <QString>
#include <QTemporaryDir>

#include <optional>

#include "core/calibration.h"

namespace headroom::gui {

class MachineCalibration : public QObject {
  Q_OBJECT

 public:
  explicit MachineCalibration(QObject* parent = nullptr);
  ~MachineCalibration() override;

  // Runs `program calibrate --device D --threads T -o FILE`; a run in flight is abandoned.
  void start(const QString& program, const QString& device, int threads);
  bool running() const { return process_.state() != QProcess::NotRunning; }

 signals:
  // The machine's calibration, or nothing with the reason (a failure, or what the calibration
  // warned of: other processes kept the cores busy while it ran).
  void finished(const std::optional<headroom::core::Calibration>& calibration, const QString& error);

 private:
  void process_finished(int exit_code, QProcess::ExitStatus status);

  QProcess process_;
  QTemporaryDir directory_;
  QString output_;
};

}  // namespace headroom::gui
