#pragma once
// The memory budget: a logarithmic slider with the device's total memory marked on it, and an
// exact field that takes what `headroom plan --budget` takes ("300MiB", "1.5GiB", bytes).
#include <QLineEdit>
#include <QSlider>
#include <QWidget>

#include "gui/logic/trace_document.h"

namespace headroom::gui {

class BudgetSlider : public QSlider {
  Q_OBJECT
 public:
  using QSlider::QSlider;
  void set_marker(int position, const QString& label);

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  int marker_ = -1;
  QString marker_label_;
};

class BudgetControl : public QWidget {
  Q_OBJECT
 public:
  explicit BudgetControl(QWidget* parent = nullptr);

  void set_range(const BudgetRange& range);
  // Shows `bytes` without emitting budgetChanged.
  void set_budget(std::int64_t bytes);
  std::int64_t budget() const { return budget_; }

  BudgetSlider* slider() const { return slider_; }
  QLineEdit* field() const { return field_; }

 signals:
  void budgetChanged(qint64 bytes);

 private:
  void slider_moved(int position);
  void field_edited();

  BudgetSlider* slider_;
  QLineEdit* field_;
  BudgetRange range_;
  std::int64_t budget_ = 0;
};

}  // namespace headroom::gui
