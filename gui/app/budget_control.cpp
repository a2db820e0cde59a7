#include "gui/app/budget_control.h"

#include <QHBoxLayout>
#include <QPainter>
#include <QSignalBlocker>
#include <QStyleOptionSlider>
#include <QVBoxLayout>

#include "core/errors.h"
#include "core/units.h"

namespace headroom::gui {

namespace {
const char* const kFieldHint = "exact budget: 300MiB, 1.5GiB or bytes";
}  // namespace

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
  field_->setToolTip(kFieldHint);
  presets_ = new QComboBox(this);
  presets_->setObjectName("budgetPresets");
  presets_->setToolTip("set the budget to a device's memory");
  // The first entry is a title, so choosing any device is a change even if it was chosen before.
  presets_->addItem("device...");
  for (const int gib : kPresetGiB) presets_->addItem(QString("%1 GiB").arg(gib), gib);
  error_ = new QLabel(this);
  error_->setObjectName("budgetError");
  error_->setWordWrap(true);
  error_->setStyleSheet("QLabel { color: #b00020; }");
  error_->hide();
  auto* exact = new QHBoxLayout;
  exact->addWidget(field_, 1);
  exact->addWidget(presets_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(slider_);
  layout->addLayout(exact);
  layout->addWidget(error_);
  connect(slider_, &QSlider::valueChanged, this, &BudgetControl::slider_moved);
  connect(field_, &QLineEdit::editingFinished, this, &BudgetControl::field_edited);
  connect(presets_, &QComboBox::activated, this, &BudgetControl::preset_chosen);
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
  clear_field_error();
}

void BudgetControl::slider_moved(int position) {
  budget_ = slider_to_budget(position, range_);
  field_->setText(QString::fromStdString(core::format_bytes(budget_)));
  clear_field_error();
  emit budgetChanged(budget_);
}

void BudgetControl::preset_chosen(int index) {
  const int gib = presets_->itemData(index).toInt();
  presets_->setCurrentIndex(0);
  if (gib <= 0) return;
  const std::int64_t bytes = std::int64_t{gib} << 30;
  const bool changed = bytes != budget_;
  set_budget(bytes);
  if (changed) emit budgetChanged(bytes);
}

void BudgetControl::show_field_error(const QString& message) {
  field_->setStyleSheet("QLineEdit { background: #fbe3e3; }");
  field_->setToolTip(message);
  error_->setText(message);
  error_->show();
}

void BudgetControl::clear_field_error() {
  field_->setStyleSheet({});
  field_->setToolTip(kFieldHint);
  error_->clear();
  error_->hide();
}

void BudgetControl::field_edited() {
  // Leaving the field unchanged is no edit (its text is the budget rounded for reading).
  if (!field_->isModified()) return;
  field_->setModified(false);
  const QString text = field_->text().trimmed();
  // The parser knows no sign, so "-1GiB" would read as "no number": say what is wrong with it.
  if (text.startsWith('-')) {
    show_field_error("Budget must be more than 0 bytes");
    return;
  }
  std::int64_t bytes = 0;
  try {
    bytes = core::parse_bytes(text.toStdString());
  } catch (const core::InputError&) {
    show_field_error(QString("Budget \"%1\" is not a size: type a number of bytes or one with a unit, such as "
                             "512MiB or 1.5GiB")
                         .arg(text));
    return;
  }
  if (bytes <= 0) {
    show_field_error("Budget must be more than 0 bytes");
    return;
  }
  // Valid again: the mark of the earlier mistake goes even when the budget itself does not change.
  const bool changed = bytes != budget_;
  set_budget(bytes);
  if (changed) emit budgetChanged(bytes);
}

}  // namespace headroom::gui
