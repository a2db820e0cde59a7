#pragma once
// The chosen plan's memory over one step, stacked by kind, with the budget as a line and the peak
// marked.
#include <QtCharts/QAreaSeries>
#include <QtCharts/QChartView>
#include <QtCharts/QLineSeries>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>

#include <array>

#include "gui/logic/plan_computation.h"

namespace headroom::gui {

class MemoryChart : public QChartView {
  Q_OBJECT
 public:
  explicit MemoryChart(QWidget* parent = nullptr);

  void show_result(const PlanResult& result);

  // For tests: the stacked top (all kinds) and the budget line.
  const QLineSeries* top_series() const { return uppers_.back(); }
  const QLineSeries* budget_series() const { return budget_; }
  const QScatterSeries* peak_series() const { return peak_; }
  double bytes_per_unit() const { return unit_; }

 private:
  std::array<QLineSeries*, core::kMemoryKinds> uppers_{};
  std::array<QLineSeries*, core::kMemoryKinds> lowers_{};
  std::array<QAreaSeries*, core::kMemoryKinds> areas_{};
  QLineSeries* budget_ = nullptr;
  QScatterSeries* peak_ = nullptr;
  QValueAxis* x_ = nullptr;
  QValueAxis* y_ = nullptr;
  double unit_ = 1 << 20;
};

}  // namespace headroom::gui
