#include "gui/app/run_panel.h"

#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "core/units.h"
#include "gui/logic/plan_computation.h"

namespace headroom::gui {

namespace {

const char* const kIdleStatus = "runs the plan with headroom execute under its budget";
// An eager capture has no file headroom execute could build the module from.
const char* const kEagerStatus = "captured in eager PyTorch: run its plans in your own training loop with headroom.apply";

// Signed, so it says which way the prediction is off: + predicted more than measured.
QString signed_percent(double fraction) {
  const double pct = 100 * fraction;
  const QString digits = QString::number(std::fabs(pct), 'f', std::fabs(pct) < 10 ? 2 : 1);
  return (pct < 0 ? QString(QChar(0x2212)) : QString("+")) + digits + " %";
}

QString relative_error(double predicted, double measured) {
  return measured != 0 ? signed_percent((predicted - measured) / measured) : QString("-");
}

// Four significant digits, fixed notation: enough to check a percent error by eye.
QString four_digits(double value) {
  const int magnitude = value == 0 ? 0 : static_cast<int>(std::floor(std::log10(std::fabs(value))));
  return QString::number(value, 'f', std::max(0, 3 - magnitude));
}

// In MiB with two decimals whatever the size, so two peaks compare digit by digit.
QString mebibytes(std::int64_t bytes) {
  return QString::number(static_cast<double>(bytes) / (1 << 20), 'f', 2) + " MiB";
}

QString step_time(double seconds) {
  return seconds < 1 ? four_digits(seconds * 1e3) + " ms" : four_digits(seconds) + " s";
}

}  // namespace

RunPanel::RunPanel(QWidget* parent) : QWidget(parent) {
  steps_ = new QSpinBox(this);
  steps_->setRange(1, 1000);
  steps_->setValue(3);
  steps_->setToolTip("measured steps, after one warm-up step");
  run_button_ = new QPushButton("Run plan", this);
  run_button_->setObjectName("runButton");
  cancel_button_ = new QPushButton("Cancel", this);
  cancel_button_->setObjectName("cancelButton");
  cancel_button_->setEnabled(false);
  progress_ = new QProgressBar(this);
  progress_->setRange(0, 1);
  progress_->setValue(0);
  status_ = new QLabel(kIdleStatus, this);
  status_->setWordWrap(true);
  stale_ = new QLabel(this);
  stale_->setObjectName("staleResults");
  stale_->setWordWrap(true);
  stale_->setStyleSheet("QLabel { color: #9a5b00; font-weight: bold; }");
  stale_->hide();
  table_ = new QTableWidget(3, 3, this);
  table_->setHorizontalHeaderLabels({"predicted", "measured", "error"});
  table_->horizontalHeaderItem(2)->setToolTip(
      "(predicted - measured) / measured: + when the prediction is higher than what was measured");
  table_->setVerticalHeaderLabels({"peak memory", "step time", "samples/s"});
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);

  auto* row = new QHBoxLayout;
  row->addWidget(new QLabel("steps", this));
  row->addWidget(steps_);
  row->addWidget(run_button_);
  row->addWidget(cancel_button_);
  row->addWidget(progress_, 1);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(row);
  layout->addWidget(status_);
  layout->addWidget(stale_);
  layout->addWidget(table_, 1);

  connect(run_button_, &QPushButton::clicked, this, &RunPanel::run);
  connect(cancel_button_, &QPushButton::clicked, this, &RunPanel::cancel);
  connect(&run_, &ExecutorRun::progress, this, &RunPanel::show_progress);
  connect(&run_, &ExecutorRun::finished, this, &RunPanel::show_outcome);
  set_plan(std::nullopt);
}

void RunPanel::set_plan(const std::optional<core::Plan>& plan) {
  plan_ = plan;
  run_button_->setEnabled(plan_.has_value() && !running() && executable());
  show_staleness();
}

bool RunPanel::executable() const { return !(trace_ && trace_->trace.model.capture == "eager"); }

void RunPanel::clear_results() {
  shown_plan_.reset();
  last_.reset();
  table_->clearContents();
  if (!running()) {
    progress_->setValue(0);
    status_->setText(executable() ? kIdleStatus : kEagerStatus);
  }
  show_staleness();
}

void RunPanel::show_staleness() {
  const bool stale = results_stale();
  if (stale) {
    const core::Plan& p = *shown_plan_;
    stale_->setText(QString("These results are for an earlier plan: budget %1, batch %2 (%3 micro-batch%4 of %5). "
                            "Run again to measure the current plan.")
                        .arg(QString::fromStdString(core::format_bytes(p.budget_bytes)))
                        .arg(p.global_batch)
                        .arg(p.choice.micro_batches.size())
                        .arg(p.choice.micro_batches.size() > 1 ? "es" : "")
                        .arg(p.choice.micro_batches.front()));
  }
  stale_->setVisible(stale);
  const QColor text = stale ? palette().color(QPalette::Disabled, QPalette::Text) : palette().color(QPalette::Text);
  for (int r = 0; r < table_->rowCount(); ++r) {
    for (int c = 0; c < table_->columnCount(); ++c) {
      if (QTableWidgetItem* item = table_->item(r, c)) item->setForeground(text);
    }
  }
}

void RunPanel::run() {
  if (!plan_ || running()) return;
  if (program_.isEmpty()) {
    emit error("Cannot run the plan",
               "The headroom command was found neither next to headroom-gui nor on PATH; build the `headroom` "
               "target or put it on PATH.");
    return;
  }
  if (!directory_.isValid()) {
    emit error("Cannot run the plan", "no temporary directory: " + directory_.errorString());
    return;
  }
  const QString plan_path = directory_.filePath("plan.json");
  const QString report_path = directory_.filePath("report.json");
  try {
    core::write_plan_file(plan_path.toStdString(), trace_ ? plan_as_written(*trace_, *plan_) : *plan_);
  } catch (const std::exception& e) {
    emit error("Cannot run the plan", QString::fromUtf8(e.what()));
    return;
  }
  const int warmup = 1;
  progress_->setRange(0, 1 + warmup + steps_->value());
  progress_->setValue(0);
  status_->setText("starting headroom execute ...");
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) table_->setItem(r, c, new QTableWidgetItem);
  }
  run_button_->setEnabled(false);
  cancel_button_->setEnabled(true);
  last_.reset();
  shown_plan_.reset();
  show_staleness();
  running_plan_ = plan_;
  run_.start(program_, plan_path, report_path, steps_->value(), warmup, plan_->choice.workers());
}

void RunPanel::show_progress(const ExecutorProgress& p) {
  progress_->setRange(0, p.total);
  progress_->setValue(p.done);
  status_->setText("executing: " + p.what);
}

void RunPanel::show_outcome(const ExecutorOutcome& outcome) {
  last_ = outcome;
  run_button_->setEnabled(plan_.has_value());
  cancel_button_->setEnabled(false);
  using Status = ExecutorOutcome::Status;
  if (outcome.status == Status::Cancelled) {
    progress_->setValue(0);
    status_->setText("cancelled");
  } else if (outcome.status == Status::Failed) {
    status_->setText("failed: " + outcome.message);
    emit error("Running the plan failed", outcome.message);
  } else {
    const core::Report& r = *outcome.report;
    progress_->setValue(progress_->maximum());
    const auto item = [](const QString& text) {
      auto* i = new QTableWidgetItem(text);
      i->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      return i;
    };
    if (outcome.status == Status::OutOfMemory && r.out_of_memory) {
      const auto& o = *r.out_of_memory;
      status_->setText(QString("out of memory under the %1 budget in %2 of %3 (micro-batch %4): %5 requested with %6 in use")
                           .arg(QString::fromStdString(core::format_bytes(o.budget_bytes)), QString::fromStdString(o.phase),
                                QString::fromStdString(o.layer))
                           .arg(o.micro_batch)
                           .arg(QString::fromStdString(core::format_bytes(o.requested_bytes)),
                                QString::fromStdString(core::format_bytes(o.in_use_bytes))));
    } else {
      status_->setText(QString("median of %1 measured steps on %2; measured peak %3 the budget")
                           .arg(r.steps)
                           .arg(QString::fromStdString(r.device_name))
                           .arg(r.budget_bytes == 0 || r.measured.peak_bytes <= r.budget_bytes ? "within" : "OVER"));
    }
    table_->setItem(0, 0, item(mebibytes(r.predicted.peak_bytes)));
    table_->setItem(0, 1, item(mebibytes(r.measured.peak_bytes)));
    table_->setItem(0, 2, item(relative_error(static_cast<double>(r.predicted.peak_bytes),
                                              static_cast<double>(r.measured.peak_bytes))));
    table_->setItem(1, 0, item(step_time(r.predicted.step_seconds)));
    table_->setItem(1, 1, item(step_time(r.measured.step_seconds)));
    table_->setItem(1, 2, item(relative_error(r.predicted.step_seconds, r.measured.step_seconds)));
    table_->setItem(2, 0, item(four_digits(r.predicted.samples_per_second)));
    table_->setItem(2, 1, item(four_digits(r.measured.samples_per_second)));
    table_->setItem(2, 2, item(relative_error(r.predicted.samples_per_second, r.measured.samples_per_second)));
    shown_plan_ = running_plan_;
  }
  show_staleness();
  emit runFinished();
}

}  // namespace headroom::gui
