#pragma once
// The memory budget: a logarithmic slider with the device's total memory marked on it, an exact
// field that takes what `headroom plan --budget` takes ("300MiB", "1.5GiB", bytes), and the memory
// of common devices as presets.
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QSlider>
#include <QWidget>

#include <array>

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
  QComboBox* presets() const { return presets_; }
  // Why the field's text was refused; hidden while the field holds a budget.
  QLabel* field_error() const { return error_; }
  bool field_rejected() const { return !error_->isHidden(); }

  // GPU memory sizes people plan for, in GiB.
  static constexpr std::array<int, 6> kPresetGiB{16, 24, 40, 48, 80, 141};

 signals:
  void budgetChanged(qint64 bytes);

 private:
  void slider_moved(int position);
  void field_edited();
  void preset_chosen(int index);
  void show_field_error(const QString& message);
  void clear_field_error();

  BudgetSlider* slider_;
  QLineEdit* field_;
  QComboBox* presets_;
  QLabel* error_;
  BudgetRange range_;
  std::int64_t budget_ = 0;
};

}  // namespace headroom::gui
