#include "gui/logic/machine_calibration.h"

#include <QFile>
#include <QSignalBlocker>

#include <algorithm>

#include "core/atomic_file.h"
#include "core/json_reader.h"

namespace headroom::gui {

MachineCalibration::MachineCalibration(QObject* parent) : QObject(parent) {
  connect(&process_, &QProcess::finished, this, &MachineCalibration::process_finished);
  connect(&process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
    if (error == QProcess::FailedToStart) {
      emit finished(std::nullopt, QStringLiteral("could not start %1: %2").arg(process_.program(), process_.errorString()));
    }
  });
}

MachineCalibration::~MachineCalibration() {
  if (running()) {
    process_.kill();
    process_.waitForFinished(5000);
  }
}

void MachineCalibration::start(const QString& program, const QString& device, int threads) {
  if (running()) {
    // The answer for the previous trace is not wanted any more.
    const QSignalBlocker quiet(this);
    process_.kill();
    process_.waitForFinished(5000);
  }
  output_ = directory_.filePath(QStringLiteral("calibration.json"));
  QFile::remove(output_);
  process_.start(program, {QStringLiteral("calibrate"), QStringLiteral("--device"), device, QStringLiteral("--threads"),
                           QString::number(std::max(threads, 1)), QStringLiteral("-o"), output_});
}

void MachineCalibration::process_finished(int exit_code, QProcess::ExitStatus status) {
  if (status != QProcess::NormalExit || exit_code != 0 || !QFile::exists(output_)) {
    const QString tail = QString::fromUtf8(process_.readAllStandardError()).trimmed();
    emit finished(std::nullopt, tail.isEmpty() ? QStringLiteral("headroom calibrate exited with code %1").arg(exit_code) : tail);
    return;
  }
  // `headroom calibrate` warns, and keeps nothing, where other processes shared the cores while it
  // ran: not the machine's speed, so not compared (as `headroom plan` does not).
  const QString said = QString::fromUtf8(process_.readAllStandardError());
  if (const qsizetype at = said.indexOf(QStringLiteral("other processes kept ")); at >= 0) {
    emit finished(std::nullopt, said.mid(at).section('\n', 0, 0).section(QStringLiteral(": "), 0, 0));
    return;
  }
  try {
    const std::string text = core::read_file(output_.toStdString());
    const nlohmann::json document = nlohmann::json::parse(text);
    emit finished(core::read_calibration(core::JsonNode(document, "$")), QString());
  } catch (const std::exception& e) {
    emit finished(std::nullopt, QString::fromUtf8(e.what()));
  }
}

}  // namespace headroom::gui
