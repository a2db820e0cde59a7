#include "gui/app/memory_chart.h"

#include <QtCharts/QLegendMarker>

#include <algorithm>
#include <cmath>

#include "core/units.h"

namespace headroom::gui {

namespace {

// Parameters, gradients, optimizer state, input, activations, transient: static state in cool
// colours at the bottom, what the plan changes in warm ones on top.
const std::array<QColor, core::kMemoryKinds> kKindColours{QColor(70, 110, 170), QColor(110, 150, 200),
                                                          QColor(160, 190, 225), QColor(150, 150, 150),
                                                          QColor(235, 150, 60),  QColor(230, 90, 80)};
const std::array<const char*, core::kMemoryKinds> kKindLabels{"parameters", "gradients", "optimizer state",
                                                              "input",      "activations", "transient"};

}  // namespace

MemoryChart::MemoryChart(QWidget* parent) : QChartView(parent) {
  setRenderHint(QPainter::Antialiasing);
  auto* chart = new QChart;
  chart->setTitle("memory over one step");
  // Six kinds, the budget and the peak do not fit under the plot without eliding their names.
  chart->legend()->setAlignment(Qt::AlignRight);
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
    areas_[k]->setName(kKindLabels[k]);
    areas_[k]->setColor(kKindColours[k]);
    areas_[k]->setBorderColor(kKindColours[k].darker(115));
    chart->addSeries(areas_[k]);
    areas_[k]->attachAxis(x_);
    areas_[k]->attachAxis(y_);
  }
  budget_ = new QLineSeries;
  budget_->setName("budget");
  QPen pen(QColor(200, 40, 40), 2, Qt::DashLine);
  budget_->setPen(pen);
  chart->addSeries(budget_);
  budget_->attachAxis(x_);
  budget_->attachAxis(y_);
  peak_ = new QScatterSeries;
  peak_->setName("peak");
  peak_->setMarkerSize(10);
  peak_->setColor(QColor(20, 20, 20));
  peak_->setPointLabelsVisible(true);
  peak_->setPointLabelsClipping(false);
  chart->addSeries(peak_);
  peak_->attachAxis(x_);
  peak_->attachAxis(y_);
  setChart(chart);
  setMinimumSize(360, 260);
}

void MemoryChart::show_result(const PlanResult& result) {
  const MemoryTimeline& t = result.timeline;
  const std::int64_t budget = result.inputs.budget_bytes;
  const std::int64_t top = std::max(budget, t.peak_bytes);
  unit_ = top >= (std::int64_t{4} << 30) ? double(1 << 30) : double(1 << 20);
  const QString unit_name = unit_ == double(1 << 30) ? "GiB" : "MiB";
  y_->setTitleText("memory (" + unit_name + ")");
  y_->setLabelFormat(unit_ == double(1 << 30) ? "%.1f" : "%.0f");

  if (!result.plan) {
    for (std::size_t k = 0; k < core::kMemoryKinds; ++k) {
      uppers_[k]->clear();
      lowers_[k]->clear();
    }
    peak_->clear();
    budget_->replace(QList<QPointF>{{0, budget / unit_}, {1, budget / unit_}});
    x_->setRange(0, 1);
    y_->setRange(0, budget / unit_ * 1.15);
    chart()->setTitle("memory over one step: no plan fits this budget");
    return;
  }
  chart()->setTitle(QString("memory over one step: %1 micro-batch%2 of %3, peak %4")
                        .arg(result.plan->micro_batches.size())
                        .arg(result.plan->micro_batches.size() > 1 ? "es" : "")
                        .arg(result.plan->micro_batches.front())
                        .arg(QString::fromStdString(core::format_bytes(t.peak_bytes))));
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
  const double end = std::max(t.step_ms, 1e-3);
  peak_->replace(QList<QPointF>{{t.peak_time_ms, t.peak_bytes / unit_}});
  peak_->setPointLabelsFormat("peak " + QString::fromStdString(core::format_bytes(t.peak_bytes)));
  x_->setRange(0, end);
  // Ticks at round times from 0, while the axis ends where the step does.
  const double raw = end / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / magnitude < 2 ? 2 * magnitude : raw / magnitude < 5 ? 5 * magnitude : 10 * magnitude;
  x_->setTickType(QValueAxis::TicksDynamic);
  x_->setTickAnchor(0);
  x_->setTickInterval(step);
  x_->setLabelFormat(step >= 1 ? "%.0f" : "%.2g");
  y_->setRange(0, static_cast<double>(top) / unit_ * 1.15);
  y_->applyNiceNumbers();
  budget_->replace(QList<QPointF>{{0, budget / unit_}, {end, budget / unit_}});
}

}  // namespace headroom::gui
