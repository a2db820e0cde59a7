#pragma once
// The planning window: open a trace, set the budget, batch, strategies and optimizer, and see the
// plan, its memory over the step, the throughput of every micro-batch size and the layers; save the
// plan or run it.
#include <QCheckBox>
#include <QComboBox>
#include <QFrame>
#include <QGroupBox>
#include <QLabel>
#include <QLineEdit>
#include <QMainWindow>
#include <QMenu>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTableView>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "gui/app/budget_control.h"
#include "gui/app/compare_dialog.h"
#include "gui/app/frozen_column_table.h"
#include "gui/app/memory_chart.h"
#include "gui/app/run_panel.h"
#include "gui/app/throughput_chart.h"
#include "gui/logic/machine_calibration.h"
#include "gui/logic/layer_table_model.h"
#include "gui/logic/plan_coordinator.h"
#include "planner/strategy_table.h"

namespace headroom::gui {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);

  // A trace that does not load, or cannot be planned from, is shown as an error naming the file
  // (and the field where there is one); the previous trace and its plan stay.
  bool open_trace(const QString& path);
  bool save_plan(const QString& path);
  // Compares the open trace (BASE) with the one at `path` (NEW) in a dialog, planned with the
  // window's budget and batch; an error is shown as for opening. Returns the dialog, or null.
  CompareDialog* compare_with(const QString& path);

  // The window's error display: a banner over the window, not a modal dialog, so nothing waits on
  // it; it stays until dismissed or a trace opens. Also what the application's last-resort guard
  // reports through (gui/app/guarded_application.h).
  void show_error(const QString& title, const QString& message);
  void clear_error();
  // The error shown, as plain text (title, newline, message); empty when none is.
  const QString& error_text() const { return error_text_; }

  // For tests.
  const PlanResult* current_result() const { return result_.get(); }
  QString warnings_text() const;
  BudgetControl* budget_control() const { return budget_; }
  QSpinBox* batch_box() const { return batch_; }
  QComboBox* optimizer_box() const { return optimizer_; }
  QComboBox* precision_box() const { return precision_; }
  QSpinBox* devices_box() const { return devices_; }
  QLineEdit* link_edit() const { return link_; }
  MemoryChart* memory_chart() const { return memory_chart_; }
  ThroughputChart* throughput_chart() const { return throughput_chart_; }
  LayerTableModel* layer_model() const { return layer_model_; }
  FrozenColumnTableView* layer_view() const { return layer_view_; }
  QLabel* budget_note() const { return budget_note_; }
  QLabel* error_label() const { return error_label_; }
  // Shown when nothing fits: sets the budget to the least that does.
  QPushButton* least_budget_button() const { return least_budget_button_; }
  RunPanel* run_panel() const { return run_panel_; }
  QString summary_text() const { return summary_->toPlainText(); }
  const TraceDocument* trace() const { return trace_.get(); }
  PlanCoordinator& coordinator() { return coordinator_; }
  MachineCalibration& machine_calibration() { return *machine_; }
  // The `headroom` command that runs plans and times this machine (found beside the app or on PATH).
  void set_headroom_program(const QString& program);
  QString recent_menu_text() const;

 signals:
  // After a fresh plan (of the latest request) is on screen.
  void planShown(quint64 generation);

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void build_menus();
  void build_layer_table();
  // The plan's warnings and its summary text.
  void build_plan_text();
  // The charts above, the layer table, the run panel and the plan's text below: the window's right side.
  QWidget* build_views();
  QWidget* build_controls();
  QGroupBox* build_budget_box(QWidget* panel);
  QGroupBox* build_step_box(QWidget* panel);
  void add_strategy_boxes(QWidget* step_box);
  void connect_controls();
  PlanInputs inputs() const;
  void replan();
  void show_result(quint64 generation, std::shared_ptr<const PlanResult> result);
  void refresh_recent_menu();
  // The slider's reach and the whole batch's need follow the trace, batch and optimizer.
  void refresh_budget_range();
  // Plans in another of the precisions the trace measured: its figures become the plan's.
  void choose_precision(const QString& name);
  void show_budget_range(const BudgetRange& range);
  QWidget* build_error_banner();
  static QString naming_the_file(const QString& absolute_path, const QString& message);
  // The opened trace's times on this machine, once `headroom calibrate` has timed it.
  void use_machine(const std::optional<core::Calibration>& here, const QString& error);

  PlanCoordinator coordinator_;
  std::shared_ptr<const TraceDocument> trace_;
  std::shared_ptr<const PlanResult> result_;
  MachineCalibration* machine_;
  QString headroom_program_;

  QFrame* error_banner_;
  QLabel* error_label_;
  QString error_text_;
  QWidget* controls_;  // disabled until a trace is open
  QLabel* trace_label_;
  BudgetControl* budget_;
  QLabel* budget_note_;
  QPushButton* least_budget_button_;
  QSpinBox* batch_;
  std::vector<std::pair<planner::Strategy, QCheckBox*>> strategy_boxes_;
  QComboBox* optimizer_;
  QComboBox* precision_;
  QSpinBox* devices_;
  QLineEdit* link_;
  QLabel* timing_;
  MemoryChart* memory_chart_;
  ThroughputChart* throughput_chart_;
  LayerTableModel* layer_model_;
  QSortFilterProxyModel* layer_proxy_;
  FrozenColumnTableView* layer_view_;
  QLabel* warnings_;
  QPlainTextEdit* summary_;
  RunPanel* run_panel_;
  QMenu* recent_menu_ = nullptr;
  QAction* save_action_ = nullptr;
  QAction* compare_action_ = nullptr;
};

}  // namespace headroom::gui
