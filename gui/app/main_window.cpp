#include "gui/app/main_window.h"

#include <QApplication>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QMenuBar>
#include <QMimeData>
#include <QSignalBlocker>
#include <QSplitter>
#include <QStyle>
#include <QToolButton>
#include <QStatusBar>
#include <QTabWidget>
#include <QVBoxLayout>

#include "core/plan.h"
#include "core/errors.h"
#include "core/rescale.h"
#include "core/trace_precisions.h"
#include "core/units.h"
#include "gui/logic/recent_files.h"
#include "planner/plan_search.h"
#include "planner/strategy_table.h"
#include "report/trace_report.h"

namespace headroom::gui {

namespace {
QString bytes_text(std::int64_t bytes) { return QString::fromStdString(core::format_bytes(bytes)); }
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("headroom");
  setAcceptDrops(true);

  memory_chart_ = new MemoryChart(this);
  throughput_chart_ = new ThroughputChart(this);
  build_layer_table();
  build_plan_text();
  run_panel_ = new RunPanel(this);
  machine_ = new MachineCalibration(this);
  set_headroom_program(find_headroom_executable(QCoreApplication::applicationDirPath()));
  connect(machine_, &MachineCalibration::finished, this, &MainWindow::use_machine);
  connect(run_panel_, &RunPanel::error, this, &MainWindow::show_error);
  QWidget* views = build_views();

  auto* main = new QSplitter(Qt::Horizontal, this);
  main->addWidget(build_controls());
  main->addWidget(views);
  main->setStretchFactor(1, 1);
  auto* central = new QWidget(this);
  auto* central_layout = new QVBoxLayout(central);
  central_layout->setContentsMargins(0, 0, 0, 0);
  central_layout->setSpacing(0);
  central_layout->addWidget(build_error_banner());
  central_layout->addWidget(main, 1);
  setCentralWidget(central);
  build_menus();
  statusBar()->showMessage("no trace");

  connect(&coordinator_, &PlanCoordinator::planReady, this, &MainWindow::show_result);
}

void MainWindow::build_layer_table() {
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
}

void MainWindow::build_plan_text() {
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
}

QWidget* MainWindow::build_views() {
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
  return right;
}

QWidget* MainWindow::build_error_banner() {
  // In the window, not a modal dialog: the window stays usable (and tests headless need no one to
  // click OK), and the reason stays in view until the user dismisses it or opens a trace.
  error_banner_ = new QFrame(this);
  error_banner_->setObjectName("errorBanner");
  error_banner_->setStyleSheet("#errorBanner { background: #fbe3e4; border-bottom: 1px solid #d9534f; }");
  error_label_ = new QLabel(error_banner_);
  error_label_->setObjectName("errorText");
  error_label_->setWordWrap(true);
  error_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  error_label_->setStyleSheet("QLabel { color: #8a1f1b; }");
  auto* dismiss = new QToolButton(error_banner_);
  dismiss->setObjectName("dismissError");
  dismiss->setAutoRaise(true);
  dismiss->setIcon(style()->standardIcon(QStyle::SP_TitleBarCloseButton));
  dismiss->setToolTip("dismiss");
  auto* layout = new QHBoxLayout(error_banner_);
  layout->setContentsMargins(10, 6, 6, 6);
  layout->addWidget(error_label_, 1);
  layout->addWidget(dismiss, 0, Qt::AlignTop);
  connect(dismiss, &QToolButton::clicked, this, &MainWindow::clear_error);
  error_banner_->hide();
  return error_banner_;
}

QWidget* MainWindow::build_controls() {
  auto* panel = new QWidget(this);
  controls_ = panel;
  panel->setMinimumWidth(240);
  panel->setMaximumWidth(320);
  auto* layout = new QVBoxLayout(panel);

  auto* trace_box = new QGroupBox("Trace", panel);
  trace_label_ = new QLabel("none: File > Open, or drop a trace.json", trace_box);
  trace_label_->setObjectName("traceLabel");
  trace_label_->setWordWrap(true);
  (new QVBoxLayout(trace_box))->addWidget(trace_label_);
  QGroupBox* budget_box = build_budget_box(panel);
  QGroupBox* step_box = build_step_box(panel);

  timing_ = new QLabel(panel);
  timing_->setStyleSheet("QLabel { color: #555; }");
  timing_->setWordWrap(true);

  layout->addWidget(trace_box);
  layout->addWidget(budget_box);
  layout->addWidget(step_box);
  layout->addWidget(timing_);
  layout->addStretch(1);
  panel->setEnabled(false);
  connect_controls();
  return panel;
}

QGroupBox* MainWindow::build_budget_box(QWidget* panel) {
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
  return budget_box;
}

QGroupBox* MainWindow::build_step_box(QWidget* panel) {
  auto* step_box = new QGroupBox("Training step", panel);
  batch_ = new QSpinBox(step_box);
  batch_->setObjectName("batchBox");
  batch_->setRange(1, static_cast<int>(planner::kMaxGlobalBatch));
  batch_->setKeyboardTracking(false);
  add_strategy_boxes(step_box);
  optimizer_ = new QComboBox(step_box);
  optimizer_->setObjectName("optimizerBox");
  // core/optimizer_spec.h's texts, which the planner takes as they are; a trace's own is added where
  // it is another (an SGD momentum of 0.5).
  optimizer_->addItems({"sgd(momentum=0)", "sgd", "adam", "adam(amsgrad)", "adamw"});
  optimizer_->setToolTip("the optimizer the plan is for; sgd is SGD with momentum 0.9, sgd(momentum=0) keeps no state");
  // The precisions the trace measured (`profile --precision fp32,bf16-autocast`): which one the
  // plan uses is the user's choice, since it changes the numerics; the plan text sets each one's
  // plan beside it.
  precision_ = new QComboBox(step_box);
  precision_->setObjectName("precisionBox");
  precision_->setToolTip("the precision the step runs in, of those the trace measured (profile --precision fp32,bf16-autocast "
                         "measures several); the plan text compares each one's plan");
  // Data parallel: workers sharing the global batch, each under the budget, and the link they
  // all-reduce over (the trace's measured one, or typed as 25GB/s,5us).
  devices_ = new QSpinBox(step_box);
  devices_->setObjectName("devicesBox");
  devices_->setRange(1, core::kMaxWorkers);
  devices_->setKeyboardTracking(false);
  devices_->setToolTip("data-parallel workers sharing the global batch, each with the budget; gradients are all-reduced "
                       "over a ring in buckets while the last micro-batch's backward runs");
  link_ = new QLineEdit(step_box);
  link_->setObjectName("linkEdit");
  link_->setPlaceholderText("25GB/s,5us");
  link_->setToolTip("the workers' link as BANDWIDTH,LATENCY (filled in from the trace's measured loopback link)");
  link_->setEnabled(false);
  auto* form = new QFormLayout(step_box);
  form->addRow("global batch", batch_);
  form->addRow("devices", devices_);
  form->addRow("link", link_);
  for (std::size_t i = 0; i < strategy_boxes_.size(); ++i) form->addRow(i == 0 ? "strategies" : "", strategy_boxes_[i].second);
  form->addRow("optimizer", optimizer_);
  form->addRow("precision", precision_);
  return step_box;
}

// One checkbox per strategy the planner can use, as its table describes it.
void MainWindow::add_strategy_boxes(QWidget* step_box) {
  for (const auto& entry : planner::strategy_table()) {
    if (!entry.implemented) continue;
    auto* box = new QCheckBox(QString::fromUtf8(entry.label.data(), static_cast<int>(entry.label.size())), step_box);
    box->setObjectName(QString("strategy_") + QString::fromUtf8(entry.name.data(), static_cast<int>(entry.name.size())));
    QString tip = QString::fromUtf8(entry.summary.data(), static_cast<int>(entry.summary.size()));
    if (!entry.needs.empty()) {
      tip += QString("\nneeds a trace with ") + QString::fromUtf8(entry.needs.data(), static_cast<int>(entry.needs.size()));
    }
    if (!entry.data_parallel) tip += "\nnot with several devices (data parallel): then left out, as by --strategies all";
    box->setToolTip(tip);
    // Every one, as `headroom plan` applies them by default ("all").
    box->setChecked(true);
    strategy_boxes_.push_back({entry.id, box});
  }
}

void MainWindow::connect_controls() {
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
  connect(precision_, &QComboBox::currentTextChanged, this, &MainWindow::choose_precision);
  connect(devices_, &QSpinBox::valueChanged, this, [this](int n) {
    link_->setEnabled(n > 1);
    // A strategy that does not run with several workers is greyed out and left out, its tick kept
    // for when there is one device again.
    for (const auto& [id, box] : strategy_boxes_) box->setEnabled(n <= 1 || planner::strategy_entry(id).data_parallel);
    replan();
  });
  connect(link_, &QLineEdit::editingFinished, this, &MainWindow::replan);
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
  compare_action_ = file->addAction("&Compare with trace...", this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, "Compare with trace", {}, "headroom traces (*.json);;All files (*)");
    if (!path.isEmpty()) compare_with(path);
  });
  compare_action_->setEnabled(false);
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

CompareDialog* MainWindow::compare_with(const QString& path) {
  if (!trace_) return nullptr;
  const QString absolute = QFileInfo(path).absoluteFilePath();
  CompareDialog* dialog = nullptr;
  try {
    auto next = load_trace_document(absolute.toStdString());
    // A trace that measured the precision shown is compared in it.
    if (next->trace.precision != trace_->trace.precision && next->trace.in_precision(trace_->trace.precision) != nullptr) {
      auto chosen = std::make_shared<TraceDocument>(*next);
      chosen->trace = core::with_precision_first(next->trace, trace_->trace.precision, next->path);
      next = std::move(chosen);
    }
    dialog = new CompareDialog(*trace_, *next, inputs(), this);
  } catch (const std::exception& e) {
    show_error("Cannot compare with " + QFileInfo(path).fileName(), naming_the_file(absolute, QString::fromUtf8(e.what())));
    return nullptr;
  }
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->show();
  return dialog;
}

bool MainWindow::open_trace(const QString& path) {
  const QString absolute = QFileInfo(path).absoluteFilePath();
  // Everything that can fail is computed before anything on screen changes, so a trace that does
  // not load, or loads but cannot be planned from, leaves the previous trace and its plan as they were.
  std::shared_ptr<const TraceDocument> document;
  StartingInputs start;
  int optimizer_index = -1;
  BudgetRange range;
  try {
    document = load_trace_document(absolute.toStdString());
    const core::Trace& trace = document->trace;
    start = starting_inputs(trace);
    if (optimizer_->findText(QString::fromStdString(trace.optimizer.name)) < 0) {
      optimizer_->addItem(QString::fromStdString(trace.optimizer.name));
    }
    optimizer_index = optimizer_->findText(QString::fromStdString(trace.optimizer.name));
    const QString optimizer = optimizer_index >= 0 ? optimizer_->itemText(optimizer_index) : optimizer_->currentText();
    range = budget_range(trace, start.global_batch, optimizer.toStdString());
  } catch (const std::exception& e) {
    show_error("Cannot open " + QFileInfo(path).fileName(), naming_the_file(absolute, QString::fromUtf8(e.what())));
    return false;
  }
  clear_error();
  trace_ = std::move(document);
  const core::Trace& trace = trace_->trace;
  remember_recent_file(path);
  refresh_recent_menu();
  setWindowTitle("headroom - " + QFileInfo(path).fileName());
  // Frozen parameters hold no gradient or optimizer state: how much trains is part of what the model is.
  const QString parameters = trace.has_frozen_parameters()
                                 ? QString("%1 of parameters, %2 trainable").arg(bytes_text(trace.param_bytes()), bytes_text(trace.trainable_param_bytes()))
                                 : QString("%1 of parameters").arg(bytes_text(trace.param_bytes()));
  trace_label_->setText(QString("%1 (%2 layers, %3)\n%4, optimizer %5\nprofiled at batch %6 to %7, in %8")
                            .arg(QString::fromStdString(trace.model.name))
                            .arg(trace.layers.size())
                            .arg(parameters)
                            .arg(QString::fromStdString(trace.device.name))
                            .arg(QString::fromStdString(trace.optimizer.name))
                            .arg(trace.batch_sizes.front())
                            .arg(trace.batch_sizes.back())
                            .arg(QString::fromStdString(trace.precision_list())) +
                        (trace.model.capture == "eager" ? QString("\ncaptured in eager PyTorch (plans run with headroom.apply)")
                                                        : QString()));
  {
    const QSignalBlocker b1(batch_), b2(optimizer_), b3(budget_), b4(precision_);
    precision_->clear();
    for (const core::Precision p : trace.precisions()) precision_->addItem(QString::fromUtf8(core::precision_name(p).data()));
    precision_->setCurrentIndex(0);
    precision_->setEnabled(trace.precisions().size() > 1);
    batch_->setValue(static_cast<int>(start.global_batch));
    if (optimizer_index >= 0) optimizer_->setCurrentIndex(optimizer_index);
    show_budget_range(range);
    budget_->set_budget(start.budget_bytes);
    link_->setText(trace.link ? QString::fromStdString(core::format_link(*trace.link)) : QString());
  }
  controls_->setEnabled(true);
  compare_action_->setEnabled(true);
  layer_model_->set_trace(trace_);
  run_panel_->set_trace(trace_);
  run_panel_->clear_results();
  statusBar()->showMessage("opened " + path);
  replan();
  // The trace's times against this machine's, as `headroom plan` compares them; the plan is
  // shown meanwhile with the trace's own.
  if (trace.calibration && !headroom_program_.isEmpty()) {
    statusBar()->showMessage("opened " + path + "; timing this machine (headroom calibrate)");
    machine_->start(headroom_program_, trace.device.is_cuda() ? "cuda" : "cpu", trace.profile.threads);
  } else {
    use_machine(std::nullopt, headroom_program_.isEmpty() ? "the headroom command was not found" : "");
  }
  return true;
}

QString MainWindow::warnings_text() const { return warnings_->isVisible() ? warnings_->text() : QString(); }

void MainWindow::set_headroom_program(const QString& program) {
  headroom_program_ = program;
  run_panel_->set_program(program);
}

void MainWindow::use_machine(const std::optional<core::Calibration>& here, const QString& error) {
  if (!trace_) return;
  auto document = std::make_shared<TraceDocument>(*trace_);
  if (!error.isEmpty() && document->trace.calibration) {
    document->machine_note = "this machine could not be timed (" + error.toStdString() + "): the times are the trace's";
  } else {
    // Each precision's note from its own calibration, before the rescale makes them this machine's.
    document->machine_notes.clear();
    for (const core::Precision precision : document->trace.precisions()) {
      core::Trace alone = *document->trace.in_precision(precision);
      alone.other_precisions.clear();
      document->machine_notes[precision] = core::times_here(alone, here, true).note;
    }
    core::TimesHere times = core::times_here(document->trace, here, true);
    if (times.rescaled) document->trace = std::move(*times.rescaled);
    document->machine_note = times.note;
  }
  if (document->machine_note == trace_->machine_note && !here) return;
  trace_ = std::move(document);
  layer_model_->set_trace(trace_);
  run_panel_->set_trace(trace_);
  if (here) statusBar()->showMessage("timed this machine: " + QString::fromStdString(report::describe_calibration(*here)));
  replan();
}

QString MainWindow::naming_the_file(const QString& absolute_path, const QString& message) {
  // Loading names the file already; what fails after it (planning from the trace's sizes) names
  // only a field, so the file is put in front.
  return message.startsWith(absolute_path) ? message : absolute_path + ": " + message;
}

void MainWindow::refresh_budget_range() {
  if (!trace_) return;
  try {
    show_budget_range(budget_range(trace_->trace, batch_->value(), optimizer_->currentText().toStdString()));
  } catch (const std::exception& e) {
    // The slider keeps its previous reach; the re-plan that follows says what the plan makes of it.
    show_error("Cannot size the budget slider", naming_the_file(QString::fromStdString(trace_->path), QString::fromUtf8(e.what())));
  }
}

void MainWindow::choose_precision(const QString& name) {
  if (!trace_ || name.isEmpty()) return;
  try {
    const core::Precision precision = core::parse_precision(name.toStdString(), "precision");
    if (precision == trace_->trace.precision) return;
    auto document = std::make_shared<TraceDocument>(*trace_);
    // The others were rescaled to this machine with it (core::times_here), so the swap keeps them so.
    document->trace = core::with_precision_first(trace_->trace, precision, trace_->path);
    if (const auto note = document->machine_notes.find(precision); note != document->machine_notes.end()) {
      document->machine_note = note->second;
    }
    trace_ = std::move(document);
  } catch (const std::exception& e) {
    show_error("Cannot plan in " + name, QString::fromUtf8(e.what()));
    return;
  }
  layer_model_->set_trace(trace_);
  run_panel_->set_trace(trace_);
  refresh_budget_range();
  replan();
}

void MainWindow::show_budget_range(const BudgetRange& range) {
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
    // As "all" does with several devices: a strategy that does not run with them is left out.
    if (box->isChecked() && (devices_->value() <= 1 || planner::strategy_entry(id).data_parallel)) in.strategies.insert(id);
  }
  in.optimizer = optimizer_->currentText().toStdString();
  in.workers = devices_->value();
  if (in.workers > 1) {
    // A link that does not parse is marked and the trace's (or none, which the plan then names) used.
    // The trace's link as the field shows it is the trace's whole: its collectives' own lines and
    // what the compute loses beside them, as `headroom plan` takes it.
    const std::string typed = link_->text().toStdString();
    try {
      const bool traces = trace_ && trace_->trace.link && typed == core::format_link(*trace_->trace.link);
      in.link = traces ? *trace_->trace.link : core::parse_link(typed);
      link_->setStyleSheet({});
    } catch (const core::InputError&) {
      link_->setStyleSheet("QLineEdit { color: #b00020; }");
      if (trace_ && trace_->trace.link) in.link = *trace_->trace.link;
    }
  }
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
    least_budget_button_->setText("Set budget to " + QString::fromStdString(core::format_bytes_at_least(r.smallest_budget)));
    least_budget_button_->setToolTip("the least budget any plan fits, with these strategies");
  }
  save_action_->setEnabled(r.plan.has_value());
  timing_->setText(QString("planned in %1 ms").arg(r.compute_ms, 0, 'f', 1));
  emit planShown(generation);
}

bool MainWindow::save_plan(const QString& path) {
  if (!result_ || !result_->plan) {
    show_error("Cannot save the plan", "No plan fits the current budget.");
    return false;
  }
  try {
    core::write_plan_file(path.toStdString(), plan_as_written(*trace_, *result_->plan));
  } catch (const std::exception& e) {
    show_error("Cannot save the plan", QString::fromUtf8(e.what()));
    return false;
  }
  statusBar()->showMessage("plan written to " + path);
  return true;
}

void MainWindow::show_error(const QString& title, const QString& message) {
  statusBar()->showMessage(title + ": " + message);
  error_label_->setText("<b>" + title.toHtmlEscaped() + "</b><br>" + message.toHtmlEscaped());
  error_banner_->show();
  error_text_ = title + "\n" + message;
}

void MainWindow::clear_error() {
  error_label_->clear();
  error_banner_->hide();
  error_text_.clear();
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
