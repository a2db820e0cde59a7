#include "gui/app/budget_control.h"

#include <QHBoxLayout>
#include <QPainter>
#include <QSignalBlocker>
#include <QStyleOptionSlider>
#include <QVBoxLayout>

#include "core/errors.h"
#include "core/units.h"

namespace headroom::gui {

void BudgetSlider::set_marker(int position, const QString& label) {
  marker_ = position;
  marker_label_ = label;
  setToolTip(label);
  update();
}

void BudgetSlider::paintEvent(QPaintEvent* event) {
  QSlider::paintEvent(event);
  if (marker_ < minimum() || marker_ > maximum()) return;
  QStyleOptionSlider option;
  initStyleOption(&option);
  const QRect groove = style()->subControlRect(QStyle::CC_Slider, &option, QStyle::SC_SliderGroove, this);
  const QRect handle = style()->subControlRect(QStyle::CC_Slider, &option, QStyle::SC_SliderHandle, this);
  const int span = groove.width() - handle.width();
  const int x = groove.left() + handle.width() / 2 +
                QStyle::sliderPositionFromValue(minimum(), maximum(), marker_, span);
  QPainter painter(this);
  painter.setPen(QPen(QColor(200, 40, 40), 2));
  painter.drawLine(x, rect().top() + 1, x, rect().bottom() - 1);
}

BudgetControl::BudgetControl(QWidget* parent) : QWidget(parent) {
  slider_ = new BudgetSlider(Qt::Horizontal, this);
  slider_->setObjectName("budgetSlider");
  slider_->setRange(0, kBudgetSliderSteps);
  field_ = new QLineEdit(this);
  field_->setObjectName("budgetField");
  field_->setToolTip("exact budget: 300MiB, 1.5GiB or bytes");
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(slider_);
  layout->addWidget(field_);
  connect(slider_, &QSlider::valueChanged, this, &BudgetControl::slider_moved);
  connect(field_, &QLineEdit::editingFinished, this, &BudgetControl::field_edited);
}

void BudgetControl::set_range(const BudgetRange& range) {
  range_ = range;
  if (range.device_bytes > 0) {
    slider_->set_marker(budget_to_slider(range.device_bytes, range),
                        "device memory " + QString::fromStdString(core::format_bytes(range.device_bytes)));
  } else {
    slider_->set_marker(-1, {});
  }
  set_budget(budget_);
}

void BudgetControl::set_budget(std::int64_t bytes) {
  budget_ = bytes;
  const QSignalBlocker block(slider_);
  if (range_.most_bytes > 0) slider_->setValue(budget_to_slider(bytes, range_));
  field_->setText(QString::fromStdString(core::format_bytes(bytes)));
  field_->setStyleSheet({});
}

void BudgetControl::slider_moved(int position) {
  budget_ = slider_to_budget(position, range_);
  field_->setText(QString::fromStdString(core::format_bytes(budget_)));
  field_->setStyleSheet({});
  emit budgetChanged(budget_);
}

void BudgetControl::field_edited() {
  // Leaving the field unchanged is no edit (its text is the budget rounded for reading).
  if (!field_->isModified()) return;
  field_->setModified(false);
  try {
    const std::int64_t bytes = core::parse_bytes(field_->text().trimmed().toStdString());
    if (bytes == budget_) return;
    set_budget(bytes);
    emit budgetChanged(bytes);
  } catch (const core::InputError& e) {
    field_->setStyleSheet("QLineEdit { background: #fbe3e3; }");
    field_->setToolTip(QString::fromUtf8(e.what()));
  }
}

}  // namespace headroom::gui
