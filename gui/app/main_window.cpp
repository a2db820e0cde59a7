#include "gui/app/main_window.h"

#include <QApplication>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHeaderView>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QSignalBlocker>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QVBoxLayout>

#include "core/plan.h"
#include "core/units.h"
#include "gui/logic/recent_files.h"
#include "planner/strategy_table.h"

namespace headroom::gui {

namespace {
QString bytes_text(std::int64_t bytes) { return QString::fromStdString(core::format_bytes(bytes)); }
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("headroom");
  setAcceptDrops(true);

  memory_chart_ = new MemoryChart(this);
  throughput_chart_ = new ThroughputChart(this);
  layer_model_ = new LayerTableModel(this);
  layer_proxy_ = new QSortFilterProxyModel(this);
  layer_proxy_->setSourceModel(layer_model_);
  layer_proxy_->setSortRole(LayerTableModel::kSortRole);
  layer_view_ = new FrozenColumnTableView(this);
  layer_view_->setObjectName("layerTable");
  layer_view_->setModel(layer_proxy_);
  layer_view_->setSortingEnabled(true);
  layer_view_->sortByColumn(LayerTableModel::Name, Qt::AscendingOrder);
  layer_view_->verticalHeader()->hide();
  layer_view_->verticalHeader()->setDefaultSectionSize(fontMetrics().height() + 6);
  layer_view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  layer_view_->horizontalHeader()->setStretchLastSection(true);
  layer_view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  layer_view_->setAlternatingRowColors(true);

  warnings_ = new QLabel(this);
  warnings_->setWordWrap(true);
  warnings_->setStyleSheet("QLabel { color: #9a5b00; }");
  warnings_->hide();
  summary_ = new QPlainTextEdit(this);
  summary_->setObjectName("planSummary");
  summary_->setReadOnly(true);
  summary_->setLineWrapMode(QPlainTextEdit::WidgetWidth);
  summary_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  summary_->setPlaceholderText("Open a trace (File > Open, or drop a trace.json here) to plan.");
  run_panel_ = new RunPanel(this);
  run_panel_->set_program(find_headroom_executable(QCoreApplication::applicationDirPath()));
  connect(run_panel_, &RunPanel::error, this, &MainWindow::report_error);

  auto* plan_box = new QGroupBox("Plan", this);
  auto* plan_layout = new QVBoxLayout(plan_box);
  plan_layout->addWidget(warnings_);
  plan_layout->addWidget(summary_, 1);

  auto* tabs = new QTabWidget(this);
  tabs->addTab(layer_view_, "Layers");
  tabs->addTab(run_panel_, "Run");

  auto* charts = new QSplitter(Qt::Horizontal, this);
  auto* memory_view = new QWidget(this);
  auto* memory_layout = new QVBoxLayout(memory_view);
  memory_layout->setContentsMargins(0, 0, 0, 0);
  memory_layout->setSpacing(2);
  memory_layout->addWidget(memory_chart_, 1);
  memory_layout->addWidget(memory_chart_->legend());
  charts->addWidget(memory_view);
  charts->addWidget(throughput_chart_);
  // Halves, whatever the window's size when it first lays out.
  charts->setStretchFactor(0, 1);
  charts->setStretchFactor(1, 1);
  charts->setSizes({500, 500});
  auto* details = new QSplitter(Qt::Horizontal, this);
  details->addWidget(tabs);
  details->addWidget(plan_box);
  details->setSizes({560, 520});
  auto* right = new QSplitter(Qt::Vertical, this);
  right->addWidget(charts);
  right->addWidget(details);
  right->setSizes({520, 340});

  auto* main = new QSplitter(Qt::Horizontal, this);
  main->addWidget(build_controls());
  main->addWidget(right);
  main->setStretchFactor(1, 1);
  setCentralWidget(main);
  build_menus();
  statusBar()->showMessage("no trace");

  connect(&coordinator_, &PlanCoordinator::planReady, this, &MainWindow::show_result);
}

QWidget* MainWindow::build_controls() {
  auto* panel = new QWidget(this);
  controls_ = panel;
  panel->setMinimumWidth(240);
  panel->setMaximumWidth(320);
  auto* layout = new QVBoxLayout(panel);

  auto* trace_box = new QGroupBox("Trace", panel);
  trace_label_ = new QLabel("none: File > Open, or drop a trace.json", trace_box);
  trace_label_->setWordWrap(true);
  (new QVBoxLayout(trace_box))->addWidget(trace_label_);

  auto* budget_box = new QGroupBox("Memory budget", panel);
  budget_ = new BudgetControl(budget_box);
  budget_note_ = new QLabel(budget_box);
  budget_note_->setWordWrap(true);
  budget_note_->setStyleSheet("QLabel { color: #555; }");
  least_budget_button_ = new QPushButton(budget_box);
  least_budget_button_->setObjectName("leastBudgetButton");
  least_budget_button_->hide();
  auto* budget_layout = new QVBoxLayout(budget_box);
  budget_layout->addWidget(budget_);
  budget_layout->addWidget(least_budget_button_);
  budget_layout->addWidget(budget_note_);

  auto* step_box = new QGroupBox("Training step", panel);
  batch_ = new QSpinBox(step_box);
  batch_->setObjectName("batchBox");
  batch_->setRange(1, 1 << 20);
  batch_->setKeyboardTracking(false);
  // One checkbox per strategy the planner can use, as its table describes it.
  for (const auto& entry : planner::strategy_table()) {
    if (!entry.implemented) continue;
    auto* box = new QCheckBox(QString::fromUtf8(entry.label.data(), static_cast<int>(entry.label.size())), step_box);
    box->setObjectName(QString("strategy_") + QString::fromUtf8(entry.name.data(), static_cast<int>(entry.name.size())));
    QString tip = QString::fromUtf8(entry.summary.data(), static_cast<int>(entry.summary.size()));
    if (!entry.needs.empty()) {
      tip += QString("\nneeds a trace with ") + QString::fromUtf8(entry.needs.data(), static_cast<int>(entry.needs.size()));
    }
    box->setToolTip(tip);
    box->setChecked(true);
    strategy_boxes_.push_back({entry.id, box});
  }
  optimizer_ = new QComboBox(step_box);
  optimizer_->setObjectName("optimizerBox");
  optimizer_->addItems({"sgd", "adam"});
  auto* form = new QFormLayout(step_box);
  form->addRow("global batch", batch_);
  for (std::size_t i = 0; i < strategy_boxes_.size(); ++i) form->addRow(i == 0 ? "strategies" : "", strategy_boxes_[i].second);
  form->addRow("optimizer", optimizer_);

  timing_ = new QLabel(panel);
  timing_->setStyleSheet("QLabel { color: #555; }");
  timing_->setWordWrap(true);

  layout->addWidget(trace_box);
  layout->addWidget(budget_box);
  layout->addWidget(step_box);
  layout->addWidget(timing_);
  layout->addStretch(1);
  panel->setEnabled(false);

  connect(budget_, &BudgetControl::budgetChanged, this, &MainWindow::replan);
  connect(least_budget_button_, &QPushButton::clicked, this, [this] {
    if (!result_ || result_->smallest_budget <= 0) return;
    budget_->set_budget(result_->smallest_budget);
    replan();
  });
  const auto refresh_and_replan = [this] {
    refresh_budget_range();
    replan();
  };
  connect(batch_, &QSpinBox::valueChanged, this, refresh_and_replan);
  for (const auto& [id, box] : strategy_boxes_) connect(box, &QCheckBox::toggled, this, &MainWindow::replan);
  // Another optimizer holds another amount of state, so the whole batch needs another amount.
  connect(optimizer_, &QComboBox::currentTextChanged, this, refresh_and_replan);
  return panel;
}

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("&Open trace...", QKeySequence::Open, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, "Open trace", {}, "headroom traces (*.json);;All files (*)");
    if (!path.isEmpty()) open_trace(path);
  });
  recent_menu_ = file->addMenu("Open &recent");
  save_action_ = file->addAction("&Save plan...", QKeySequence::Save, this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, "Save plan", "plan.json", "headroom plans (*.json)");
    if (!path.isEmpty()) save_plan(path);
  });
  save_action_->setEnabled(false);
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);
  refresh_recent_menu();
}

void MainWindow::refresh_recent_menu() {
  recent_menu_->clear();
  const QStringList files = recent_files();
  for (const QString& path : files) {
    recent_menu_->addAction(QFileInfo(path).fileName() + "  (" + QFileInfo(path).path() + ")", this,
                            [this, path] { open_trace(path); });
  }
  recent_menu_->setEnabled(!files.isEmpty());
}

QString MainWindow::recent_menu_text() const {
  QStringList items;
  for (const QAction* a : recent_menu_->actions()) items << a->text();
  return items.join('\n');
}

bool MainWindow::open_trace(const QString& path) {
  std::shared_ptr<const TraceDocument> document;
  try {
    document = load_trace_document(QFileInfo(path).absoluteFilePath().toStdString());
  } catch (const std::exception& e) {
    report_error("Cannot open trace", QString::fromUtf8(e.what()));
    return false;
  }
  trace_ = document;
  const core::Trace& trace = trace_->trace;
  remember_recent_file(path);
  refresh_recent_menu();
  setWindowTitle("headroom - " + QFileInfo(path).fileName());
  trace_label_->setText(QString("%1 (%2 layers, %3 of parameters)\n%4, optimizer %5\nprofiled at batch %6 to %7")
                            .arg(QString::fromStdString(trace.model.name))
                            .arg(trace.layers.size())
                            .arg(bytes_text(trace.param_bytes()))
                            .arg(QString::fromStdString(trace.device.name))
                            .arg(QString::fromStdString(trace.optimizer.name))
                            .arg(trace.batch_sizes.front())
                            .arg(trace.batch_sizes.back()));
  const StartingInputs start = starting_inputs(trace);
  {
    const QSignalBlocker b1(batch_), b2(optimizer_), b3(budget_);
    batch_->setValue(static_cast<int>(start.global_batch));
    const int measured = optimizer_->findText(QString::fromStdString(trace.optimizer.name));
    if (measured >= 0) optimizer_->setCurrentIndex(measured);
    refresh_budget_range();
    budget_->set_budget(start.budget_bytes);
  }
  controls_->setEnabled(true);
  layer_model_->set_trace(trace_);
  run_panel_->clear_results();
  statusBar()->showMessage("opened " + path);
  replan();
  return true;
}

void MainWindow::refresh_budget_range() {
  if (!trace_) return;
  const BudgetRange range = budget_range(trace_->trace, batch_->value(), optimizer_->currentText().toStdString());
  budget_->set_range(range);
  QString note = range.device_bytes > 0 ? "red mark: device memory " + bytes_text(range.device_bytes) + "; " : QString();
  note += QString("the whole batch (%1) with %2 needs %3")
              .arg(batch_->value())
              .arg(optimizer_->currentText(), bytes_text(range.whole_batch_bytes));
  budget_note_->setText(note);
}

PlanInputs MainWindow::inputs() const {
  PlanInputs in;
  in.budget_bytes = budget_->budget();
  in.global_batch = batch_->value();
  in.strategies.clear();
  for (const auto& [id, box] : strategy_boxes_) {
    if (box->isChecked()) in.strategies.insert(id);
  }
  in.optimizer = optimizer_->currentText().toStdString();
  return in;
}

void MainWindow::replan() {
  if (!trace_) return;
  coordinator_.request(trace_, inputs());
}

void MainWindow::show_result(quint64 generation, std::shared_ptr<const PlanResult> result) {
  result_ = std::move(result);
  const PlanResult& r = *result_;
  memory_chart_->show_result(r);
  throughput_chart_->show_result(r);
  layer_model_->set_plan(r.plan);
  summary_->setPlainText(QString::fromStdString(r.summary));
  QStringList warnings;
  if (r.plan) {
    for (const auto& w : r.plan->warnings) warnings << "warning: " + QString::fromStdString(w);
  } else {
    warnings << QString::fromStdString(r.error.empty() ? "no plan fits: " + r.infeasible_reason : r.error);
  }
  warnings_->setText(warnings.join('\n'));
  warnings_->setVisible(!warnings.isEmpty());
  run_panel_->set_plan(r.plan);
  least_budget_button_->setVisible(!r.plan && r.smallest_budget > 0);
  if (!r.plan && r.smallest_budget > 0) {
    least_budget_button_->setText("Set budget to " + bytes_text(r.smallest_budget));
    least_budget_button_->setToolTip("the least budget any plan fits, with these strategies");
  }
  save_action_->setEnabled(r.plan.has_value());
  timing_->setText(QString("planned in %1 ms").arg(r.compute_ms, 0, 'f', 1));
  emit planShown(generation);
}

bool MainWindow::save_plan(const QString& path) {
  if (!result_ || !result_->plan) {
    report_error("Cannot save the plan", "No plan fits the current budget.");
    return false;
  }
  try {
    core::write_plan_file(path.toStdString(), *result_->plan);
  } catch (const std::exception& e) {
    report_error("Cannot save the plan", QString::fromUtf8(e.what()));
    return false;
  }
  statusBar()->showMessage("plan written to " + path);
  return true;
}

void MainWindow::report_error(const QString& title, const QString& message) {
  statusBar()->showMessage(title + ": " + message);
  QMessageBox::warning(this, title, message);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls() && event->mimeData()->urls().front().isLocalFile()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  const auto urls = event->mimeData()->urls();
  if (!urls.isEmpty() && urls.front().isLocalFile()) {
    event->acceptProposedAction();
    open_trace(urls.front().toLocalFile());
  }
}

}  // namespace headroom::gui
