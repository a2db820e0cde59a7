#include "gui/app/throughput_chart.h"

#include <QtCharts/QAreaSeries>
#include <QtCharts/QLegendMarker>

#include <QCursor>
#include <QToolTip>

#include <algorithm>
#include <cmath>

namespace headroom::gui {

namespace {

void hide_from_legend(QChart* chart, QAbstractSeries* series) {
  for (auto* marker : chart->legend()->markers(series)) marker->setVisible(false);
}

}  // namespace

ThroughputChart::ThroughputChart(QWidget* parent) : QChartView(parent) {
  setRenderHint(QPainter::Antialiasing);
  auto* chart = new QChart;
  chart->setTitle("throughput by micro-batch size");
  chart->legend()->setAlignment(Qt::AlignBottom);
  chart->setMargins(QMargins(4, 4, 4, 4));
  x_ = new QLogValueAxis;
  x_->setBase(2);
  x_->setLabelFormat("%g");
  x_->setTitleText("micro-batch size (samples)");
  y_ = new QValueAxis;
  y_->setTitleText("predicted samples/s");
  y_->setLabelFormat("%.0f");
  chart->addAxis(x_, Qt::AlignBottom);
  chart->addAxis(y_, Qt::AlignLeft);

  curve_ = new QLineSeries;
  curve_->setPen(QPen(QColor(150, 150, 150), 1.5));
  feasible_ = new QScatterSeries;
  feasible_->setName("fits");
  feasible_->setColor(QColor(60, 150, 80));
  feasible_->setMarkerSize(9);
  infeasible_ = new QScatterSeries;
  infeasible_->setName("over budget");
  infeasible_->setColor(QColor(210, 60, 50));
  infeasible_->setMarkerSize(9);
  chosen_ = new QScatterSeries;
  chosen_->setName("chosen");
  chosen_->setMarkerShape(QScatterSeries::MarkerShapeRectangle);
  chosen_->setMarkerSize(15);
  chosen_->setColor(Qt::transparent);
  chosen_->setBorderColor(QColor(30, 60, 160));
  chosen_->setPen(QPen(QColor(30, 60, 160), 2.5));
  for (QAbstractSeries* s : std::initializer_list<QAbstractSeries*>{curve_, feasible_, infeasible_, chosen_}) {
    chart->addSeries(s);
    s->attachAxis(x_);
    s->attachAxis(y_);
  }
  hide_from_legend(chart, curve_);
  for (QScatterSeries* s : {feasible_, infeasible_, chosen_}) {
    connect(s, &QScatterSeries::hovered, this, [this](const QPointF& point, bool entered) {
      const QString text = entered ? hover_text_for(std::llround(point.x())) : QString();
      if (text.isEmpty()) {
        QToolTip::hideText();
      } else {
        QToolTip::showText(QCursor::pos(), text, this);
      }
    });
  }
  setChart(chart);
  setMinimumSize(360, 260);
}

void ThroughputChart::show_result(const PlanResult& result) {
  points_ = result.throughput.points;
  const auto& points = points_;
  QList<QPointF> all, fits, over, chosen;
  double top = 0;
  for (const auto& p : points) {
    const QPointF at(static_cast<double>(p.micro_batch), p.samples_per_second);
    all.append(at);
    (p.fits ? fits : over).append(at);
    top = std::max(top, p.samples_per_second);
  }
  if (result.throughput.chosen >= 0) chosen.append(all[result.throughput.chosen]);
  curve_->replace(all);
  feasible_->replace(fits);
  infeasible_->replace(over);
  chosen_->replace(chosen);

  const double lo = points.empty() ? 1 : static_cast<double>(points.front().micro_batch) / 1.4;
  const double hi = points.empty() ? 2 : static_cast<double>(points.back().micro_batch) * 1.4;
  x_->setRange(lo, hi);
  // Round ticks with the decimals they need: a model at 1.3 samples/s reads "0, 0.5, 1, 1.5".
  y_ticks_ = nice_ticks(top * 1.1, 5);
  y_->setTickType(QValueAxis::TicksDynamic);
  y_->setTickAnchor(0);
  y_->setTickInterval(y_ticks_.interval);
  y_->setLabelFormat(QString("%.%1f").arg(y_ticks_.decimals));
  y_->setRange(0, y_ticks_.max);
  const double y_top = y_ticks_.max;

  // Shade each run of sizes over the budget, from halfway (geometrically) to its neighbours.
  for (auto* s : shading_) {
    chart()->removeSeries(s);
    delete s;
  }
  shading_.clear();
  for (std::size_t i = 0; i < points.size();) {
    if (points[i].fits) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j + 1 < points.size() && !points[j + 1].fits) ++j;
    const auto size = [&](std::size_t k) { return static_cast<double>(points[k].micro_batch); };
    const double left = i == 0 ? lo : std::sqrt(size(i - 1) * size(i));
    const double right = j + 1 == points.size() ? hi : std::sqrt(size(j) * size(j + 1));
    auto* upper = new QLineSeries;
    upper->append({{left, y_top}, {right, y_top}});
    auto* lower = new QLineSeries;
    lower->append({{left, 0}, {right, 0}});
    auto* area = new QAreaSeries(upper, lower);
    upper->setParent(area);
    lower->setParent(area);
    area->setColor(QColor(210, 60, 50, 40));
    area->setBorderColor(Qt::transparent);
    chart()->addSeries(area);
    area->attachAxis(x_);
    area->attachAxis(y_);
    hide_from_legend(chart(), area);
    shading_.push_back(area);
    i = j + 1;
  }
  // Series draw in the order they were added: put the curve and markers back on top of the shading.
  if (!shading_.empty()) {
    for (QAbstractSeries* s : std::initializer_list<QAbstractSeries*>{curve_, feasible_, infeasible_, chosen_}) {
      chart()->removeSeries(s);
      chart()->addSeries(s);
      s->attachAxis(x_);
      s->attachAxis(y_);
    }
    hide_from_legend(chart(), curve_);
  }
  chart()->setTitle(QString("throughput by micro-batch size, global batch %1").arg(result.inputs.global_batch));
}

QStringList ThroughputChart::y_tick_labels() const {
  QStringList labels;
  for (const auto& label : tick_labels(y_ticks_)) labels << QString::fromStdString(label);
  return labels;
}

QString ThroughputChart::hover_text_for(std::int64_t micro_batch) const {
  for (const auto& p : points_) {
    if (p.micro_batch == micro_batch) return QString::fromStdString(throughput_hover_text(p));
  }
  return {};
}

}  // namespace headroom::gui
