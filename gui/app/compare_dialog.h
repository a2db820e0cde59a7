#pragma once
// `headroom compare` in the desktop app: the open trace (BASE) against a second one (NEW), as the
// command prints it: a layer table with a change column, the summary planned with the window's
// budget and batch, and the two plans' memory over the step overlaid.
#include <QDialog>
#include <QLabel>
#include <QTableWidget>
#include <QtCharts/QChartView>

#include "gui/logic/plan_computation.h"
#include "gui/logic/trace_document.h"
#include "report/comparison.h"

namespace headroom::gui {

class CompareDialog : public QDialog {
  Q_OBJECT
 public:
  // Throws core::InputError when the traces cannot be compared (no batch size in common).
  CompareDialog(const TraceDocument& base, const TraceDocument& next, const PlanInputs& inputs, QWidget* parent = nullptr);

  // For tests.
  const report::TraceComparison& comparison() const { return comparison_; }
  QTableWidget* layer_table() const { return table_; }
  QChartView* chart_view() const { return chart_; }
  QLabel* summary() const { return summary_; }

 private:
  report::TraceComparison comparison_;
  QTableWidget* table_;
  QChartView* chart_;
  QLabel* summary_;
};

}  // namespace headroom::gui
