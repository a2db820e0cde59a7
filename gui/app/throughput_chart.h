#pragma once
// Predicted samples/s for every micro-batch size of the global batch: the sizes that fit the
// budget, those that do not (on a shaded region), and the chosen plan. Hovering a point says what
// that split would be: its peak, step time, checkpointed blocks and Tempo layers.
#include <QtCharts/QChartView>
#include <QtCharts/QLineSeries>
#include <QtCharts/QLogValueAxis>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>

#include <vector>

#include "gui/logic/chart_axis.h"

#include "gui/logic/plan_computation.h"

namespace headroom::gui {

class ThroughputChart : public QChartView {
  Q_OBJECT
 public:
  explicit ThroughputChart(QWidget* parent = nullptr);

  void show_result(const PlanResult& result);

  const QScatterSeries* feasible_series() const { return feasible_; }
  const QScatterSeries* infeasible_series() const { return infeasible_; }
  const QScatterSeries* chosen_series() const { return chosen_; }
  // The vertical axis's labels, as drawn.
  QStringList y_tick_labels() const;
  // The tooltip of the split whose largest micro-batch is `micro_batch` (empty if none).
  QString hover_text_for(std::int64_t micro_batch) const;

 private:
  QLineSeries* curve_ = nullptr;
  QScatterSeries* feasible_ = nullptr;
  QScatterSeries* infeasible_ = nullptr;
  QScatterSeries* chosen_ = nullptr;
  std::vector<QAbstractSeries*> shading_;
  QLogValueAxis* x_ = nullptr;
  QValueAxis* y_ = nullptr;
  NiceTicks y_ticks_;
  std::vector<ThroughputPoint> points_;
};

}  // namespace headroom::gui
