#include "gui/app/memory_chart.h"

#include <QtCharts/QLegendMarker>

#include <QMouseEvent>
#include <QPainter>
#include <QPixmap>
#include <QToolTip>

#include <algorithm>
#include <cmath>

#include "core/units.h"
#include "gui/logic/chart_axis.h"

namespace headroom::gui {

namespace {

// Parameters, gradients, optimizer state, library workspace, gathered parameters, input,
// activations, transient: static state in cool colours at the bottom, what the plan changes in warm
// ones on top.
const std::array<QColor, core::kMemoryKinds> kKindColours{QColor(70, 110, 170),  QColor(110, 150, 200),
                                                          QColor(160, 190, 225), QColor(200, 212, 225),
                                                          QColor(80, 170, 150),  QColor(150, 150, 150),
                                                          QColor(235, 150, 60),  QColor(230, 90, 80)};
QString kind_label(std::size_t k) {
  return QString::fromUtf8(core::kMemoryKindLabels[k].data(), static_cast<qsizetype>(core::kMemoryKindLabels[k].size()));
}
const QColor kBudgetColour(200, 40, 40);
const QColor kBandColour(70, 70, 70);

// Hatching over a pale wash: the kinds stay readable beneath, and the band does not read as memory
// held all along.
QBrush band_brush() {
  QPixmap tile(8, 8);
  tile.fill(QColor(255, 255, 255, 130));
  QPainter painter(&tile);
  painter.setPen(QPen(kBandColour, 1));
  painter.drawLine(0, 8, 8, 0);
  return QBrush(tile);
}
const QColor kAllowedColour(225, 120, 30);

QString bytes_text(std::int64_t bytes) { return QString::fromStdString(core::format_bytes(bytes)); }

QLineSeries* line(QChart* chart, const QString& name, const QPen& pen) {
  auto* series = new QLineSeries;
  series->setName(name);
  series->setPen(pen);
  chart->addSeries(series);
  return series;
}

}  // namespace

MemoryChart::MemoryChart(QWidget* parent) : QChartView(parent) {
  setRenderHint(QPainter::Antialiasing);
  // Partial redraws of a chart leave pieces of moved text behind.
  setViewportUpdateMode(QGraphicsView::FullViewportUpdate);
  setMouseTracking(true);
  auto* chart = new QChart;
  chart->setTitle("memory over one step");
  chart->legend()->hide();
  legend_ = new QLabel;
  legend_->setObjectName("memoryLegend");
  legend_->setWordWrap(true);
  legend_->setTextFormat(Qt::RichText);
  // Its width is the chart's: unwrapped, its one long line would widen the chart beside it.
  legend_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  legend_->setContentsMargins(8, 0, 8, 0);
  chart->setMargins(QMargins(4, 4, 4, 4));
  x_ = new QValueAxis;
  x_->setTitleText("time (ms)");
  x_->setLabelFormat("%.0f");
  y_ = new QValueAxis;
  y_->setLabelFormat("%.0f");
  chart->addAxis(x_, Qt::AlignBottom);
  chart->addAxis(y_, Qt::AlignLeft);
  for (std::size_t k = 0; k < core::kMemoryKinds; ++k) {
    uppers_[k] = new QLineSeries(chart);
    lowers_[k] = new QLineSeries(chart);
    areas_[k] = new QAreaSeries(uppers_[k], lowers_[k]);
    areas_[k]->setName(kind_label(k));
    areas_[k]->setColor(kKindColours[k]);
    areas_[k]->setBorderColor(kKindColours[k].darker(115));
    chart->addSeries(areas_[k]);
  }
  band_upper_ = new QLineSeries(chart);
  band_lower_ = new QLineSeries(chart);
  band_ = new QAreaSeries(band_upper_, band_lower_);
  band_->setName("repeated micro-batches");
  band_->setBrush(band_brush());
  band_->setPen(QPen(kBandColour, 1));
  chart->addSeries(band_);
  floor_ = line(chart, "floor", QPen(QColor(40, 40, 40), 1.5, Qt::DashDotLine));
  allowed_ = line(chart, "allowed", QPen(kAllowedColour, 1.5, Qt::DotLine));
  budget_ = line(chart, "budget", QPen(kBudgetColour, 2, Qt::DashLine));
  peak_ = new QScatterSeries;
  peak_->setName("peak");
  peak_->setMarkerSize(10);
  peak_->setColor(QColor(20, 20, 20));
  chart->addSeries(peak_);
  for (QAbstractSeries* s : chart->series()) {
    s->attachAxis(x_);
    s->attachAxis(y_);
  }
  update_legend(false, false, true, false);

  peak_label_ = new QGraphicsSimpleTextItem(chart);
  peak_label_->setZValue(20);
  off_scale_label_ = new QGraphicsSimpleTextItem(chart);
  off_scale_label_->setZValue(20);
  off_scale_label_->setBrush(kBudgetColour);
  peak_label_->hide();
  off_scale_label_->hide();
  connect(chart, &QChart::plotAreaChanged, this, &MemoryChart::place_labels);
  setChart(chart);
  setMinimumSize(300, 240);
}

void MemoryChart::show_result(const PlanResult& result) {
  const bool feasible = result.plan.has_value();
  timeline_ = result.timeline;
  const MemoryTimeline& t = timeline_;
  const std::int64_t budget = result.inputs.budget_bytes;
  const std::int64_t allowed =
      feasible ? budget - result.plan->margin_bytes : allowed_bytes(budget, result.inputs.margin_fraction);
  const MemoryScale scale = memory_scale(std::max(t.peak_bytes, result.floor_bytes), budget);
  unit_ = scale.top_bytes >= (std::int64_t{4} << 30) ? double(1 << 30) : double(1 << 20);
  y_->setTitleText(unit_ == double(1 << 30) ? "memory (GiB)" : "memory (MiB)");
  show_title(result);
  draw_kinds();
  const double end = t.time_ms.empty() ? 1 : std::max(t.step_ms, 1e-3);
  set_axes(end, scale.top_bytes);
  draw_levels(result, allowed, end, scale.budget_off_scale);
  const bool banded = draw_repeat_band();
  update_legend(!feasible && result.floor_bytes > 0, feasible, !scale.budget_off_scale, banded);

  if (feasible) {
    peak_->replace(QList<QPointF>{{t.peak_time_ms, t.peak_bytes / unit_}});
    peak_label_->setText("peak " + bytes_text(t.peak_bytes));
    peak_label_->show();
  } else {
    peak_->clear();
    peak_label_->hide();
  }
  off_scale_label_->setText(QString("budget %1 (allowed %2) is above the scale \u2191").arg(bytes_text(budget), bytes_text(allowed)));
  off_scale_label_->setVisible(scale.budget_off_scale);
  place_labels();
}

void MemoryChart::show_title(const PlanResult& result) {
  if (result.plan) {
    // Data parallel: the step drawn is worker 0's, which carries the largest share.
    const auto& choice = result.plan->choice;
    const auto mine = choice.worker_micro_batches(0);
    chart()->setTitle(QString("memory over one step%4: %1 micro-batch%2 of %3")
                          .arg(mine.size())
                          .arg(mine.size() > 1 ? "es" : "")
                          .arg(mine.front())
                          .arg(choice.data_parallel ? QString(" of worker 0 (of %1)").arg(choice.workers()) : QString()));
  } else if (result.best_attempt) {
    chart()->setTitle(QString("no plan fits %1: the least that fits (shown) needs %2")
                          .arg(bytes_text(result.inputs.budget_bytes),
                               QString::fromStdString(core::format_bytes_at_least(result.smallest_budget))));
  } else {
    chart()->setTitle("memory over one step: no plan");
  }
}

void MemoryChart::draw_kinds() {
  const MemoryTimeline& t = timeline_;
  // Memory changes in steps: each sample holds until the next one.
  std::array<QList<QPointF>, core::kMemoryKinds> upper, lower;
  for (std::size_t i = 0; i < t.time_ms.size(); ++i) {
    double below = 0;
    for (std::size_t k = 0; k < core::kMemoryKinds; ++k) {
      const double above = below + static_cast<double>(t.bytes[i][k]) / unit_;
      if (i > 0) {
        upper[k].append({t.time_ms[i], upper[k].back().y()});
        lower[k].append({t.time_ms[i], lower[k].back().y()});
      }
      upper[k].append({t.time_ms[i], above});
      lower[k].append({t.time_ms[i], below});
      below = above;
    }
  }
  for (std::size_t k = 0; k < core::kMemoryKinds; ++k) {
    uppers_[k]->replace(upper[k]);
    lowers_[k]->replace(lower[k]);
  }
}

void MemoryChart::set_axes(double end_ms, std::int64_t top_bytes) {
  x_->setRange(0, end_ms);
  // Ticks at round times from 0, while the axis ends where the step does.
  const NiceTicks time_ticks = nice_ticks(end_ms, 5);
  x_->setTickType(QValueAxis::TicksDynamic);
  x_->setTickAnchor(0);
  x_->setTickInterval(time_ticks.interval);
  x_->setLabelFormat(QString("%.%1f").arg(time_ticks.decimals));
  // Room above the highest line for the peak's label.
  const NiceTicks memory_ticks = nice_ticks(static_cast<double>(top_bytes) / unit_ * 1.12, 5);
  y_->setTickType(QValueAxis::TicksDynamic);
  y_->setTickAnchor(0);
  y_->setTickInterval(memory_ticks.interval);
  y_->setLabelFormat(QString("%.%1f").arg(memory_ticks.decimals));
  y_->setRange(0, memory_ticks.max);
}

void MemoryChart::draw_levels(const PlanResult& result, std::int64_t allowed, double end_ms, bool budget_off_scale) {
  const std::int64_t budget = result.inputs.budget_bytes;
  const auto level = [&](std::int64_t bytes) { return QList<QPointF>{{0, bytes / unit_}, {end_ms, bytes / unit_}}; };
  // Off the scale, a line would be drawn outside the plot: the label at the top says where it is.
  budget_->replace(budget_off_scale ? QList<QPointF>{} : level(budget));
  allowed_->replace(budget_off_scale ? QList<QPointF>{} : level(allowed));
  budget_->setName("budget " + bytes_text(budget));
  allowed_->setName("allowed " + bytes_text(allowed));
  floor_->replace(result.plan.has_value() || result.floor_bytes == 0 ? QList<QPointF>{} : level(result.floor_bytes));
  floor_->setName("floor " + bytes_text(result.floor_bytes));
}

bool MemoryChart::draw_repeat_band() {
  // The runs too narrow to draw one by one, from their second micro-batch on (the first is drawn).
  QList<QPointF> band_upper, band_lower;
  for (const RepeatSpan& run : timeline_.repeats) {
    if (!run.banded) continue;
    const double from = run.start_ms + run.period_ms, low = run.low_bytes / unit_, high = run.peak_bytes / unit_;
    band_upper << QPointF(from, low) << QPointF(from, high) << QPointF(run.end_ms, high) << QPointF(run.end_ms, low);
    band_lower << QPointF(from, low) << QPointF(from, low) << QPointF(run.end_ms, low) << QPointF(run.end_ms, low);
  }
  band_upper_->replace(band_upper);
  band_lower_->replace(band_lower);
  return !band_upper.isEmpty();
}

void MemoryChart::update_legend(bool with_floor, bool with_peak, bool with_budget, bool with_band) {
  // Non-breaking spaces inside an entry, plain ones between: lines break only between entries.
  const auto entry = [](const QColor& colour, const QString& symbol, const QString& name) {
    QString text = name.toHtmlEscaped();
    text.replace(' ', "&nbsp;");
    return QString("<span style='color:%1'>%2</span>&nbsp;%3").arg(colour.name(), symbol, text);
  };
  // Gathered parameters are a stage-3 plan's alone: named where the step has some.
  const auto gathered = static_cast<std::size_t>(core::MemoryKind::GatheredParameter);
  const bool gathers = std::any_of(timeline_.bytes.begin(), timeline_.bytes.end(),
                                   [&](const auto& point) { return point[gathered] > 0; });
  QStringList entries;
  for (std::size_t k = 0; k < core::kMemoryKinds; ++k) {
    if (k != gathered || gathers) entries << entry(kKindColours[k], "\u25A0", kind_label(k));
  }
  if (with_peak) entries << entry(QColor(20, 20, 20), "\u25CF", "peak");
  if (with_band) entries << entry(kBandColour, "\u25A8", "repeated micro-batches (each rises and falls within)");
  // Box-drawing dashes: the line breaker treats them as letters, so a symbol stays with its name.
  if (with_budget) {
    entries << entry(kBudgetColour, "\u254D\u254D", budget_->name());
    entries << entry(kAllowedColour, "\u2504\u2504", allowed_->name());
  }
  if (with_floor) entries << entry(QColor(40, 40, 40), "\u2500\u2500", floor_->name());
  legend_->setText(entries.join(" &nbsp; "));
  // The floor is drawn only where it holds: with L2L allowed it keeps the training state on
  // the host and goes below it.
  legend_->setToolTip(QString("allowed: the budget less the planner's margin, which the plan's peak stays under\n") +
                      (with_floor ? "floor: parameters, gradients and optimizer state, which no plan without L2L goes "
                                    "below\n"
                                  : "") +
                      "hatched band: micro-batches like the first one drawn, too many to draw one by one; "
                      "each rises from the band's foot to its top and falls back");
}

void MemoryChart::place_labels() {
  const QRectF plot = chart()->plotArea();
  if (plot.isEmpty()) return;
  if (peak_label_->isVisible() && peak_->count() == 1) {
    const QPointF at = chart()->mapToPosition(peak_->at(0), peak_);
    const QRectF box = peak_label_->boundingRect();
    // Right of the marker, or left of it near the right edge; above it, inside the plot.
    double x = at.x() + 8;
    if (x + box.width() > plot.right() - 2) x = at.x() - 8 - box.width();
    double y = at.y() - box.height() - 4;
    x = std::clamp(x, plot.left() + 2, std::max(plot.left() + 2, plot.right() - 2 - box.width()));
    y = std::clamp(y, plot.top() + 2, std::max(plot.top() + 2, plot.bottom() - 2 - box.height()));
    peak_label_->setPos(x, y);
  }
  if (off_scale_label_->isVisible()) {
    const QRectF box = off_scale_label_->boundingRect();
    off_scale_label_->setPos(std::max(plot.left() + 2, plot.right() - 4 - box.width()), plot.top() + 2);
  }
}

QString MemoryChart::hover_text_at(double time_ms) const {
  return QString::fromStdString(memory_hover_text(timeline_, time_ms));
}

void MemoryChart::mouseMoveEvent(QMouseEvent* event) {
  QChartView::mouseMoveEvent(event);
  const QPointF scene = mapToScene(event->position().toPoint());
  const QPointF in_chart = chart()->mapFromScene(scene);
  QString text;
  if (chart()->plotArea().contains(in_chart) && !timeline_.time_ms.empty()) {
    text = hover_text_at(chart()->mapToValue(in_chart, areas_.front()).x());
  }
  if (text.isEmpty()) {
    QToolTip::hideText();
  } else {
    QToolTip::showText(event->globalPosition().toPoint(), text, this);
  }
}

}  // namespace headroom::gui
