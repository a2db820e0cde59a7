#pragma once
// The plan's memory over one step, stacked by kind, with the budget, what the margin leaves of it
// ("allowed") and the peak marked. When nothing fits: the plan at the least budget that would,
// against the user's budget, and the floor no plan without L2L goes below (not drawn where L2L may
// keep the training state on the host). Hovering says what is held when.
// Thousands of identical micro-batches are drawn as their first one and a hatched band from the
// level between them to the peak each reaches.
#include <QtCharts/QAreaSeries>
#include <QtCharts/QChartView>
#include <QtCharts/QLineSeries>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>

#include <QGraphicsSimpleTextItem>
#include <QLabel>

#include <array>

#include "gui/logic/plan_computation.h"

namespace headroom::gui {

class MemoryChart : public QChartView {
  Q_OBJECT
 public:
  explicit MemoryChart(QWidget* parent = nullptr);

  void show_result(const PlanResult& result);

  // The legend, to place under the chart: it wraps its entries onto more lines when the chart is
  // narrow, where the chart's own legend would elide every name to two letters.
  QLabel* legend() const { return legend_; }

  // What the tooltip says at a time of the step shown (empty outside it).
  QString hover_text_at(double time_ms) const;

  // For tests.
  const QLineSeries* top_series() const { return uppers_.back(); }
  const QLineSeries* budget_series() const { return budget_; }
  const QLineSeries* allowed_series() const { return allowed_; }
  const QLineSeries* floor_series() const { return floor_; }
  const QScatterSeries* peak_series() const { return peak_; }
  const QLineSeries* band_series() const { return band_upper_; }
  const QGraphicsSimpleTextItem* peak_label() const { return peak_label_; }
  const QGraphicsSimpleTextItem* off_scale_label() const { return off_scale_label_; }
  const QValueAxis* y_axis() const { return y_; }
  double bytes_per_unit() const { return unit_; }

 protected:
  void mouseMoveEvent(QMouseEvent* event) override;

 private:
  void place_labels();
  void show_title(const PlanResult& result);
  // The kinds' stacked areas over the step.
  void draw_kinds();
  void set_axes(double end_ms, std::int64_t top_bytes);
  // The budget, what the margin leaves of it, and (when nothing fits) the floor.
  void draw_levels(const PlanResult& result, std::int64_t allowed, double end_ms, bool budget_off_scale);
  // Returns whether any run is drawn as a band.
  bool draw_repeat_band();
  void update_legend(bool with_floor, bool with_peak, bool with_budget, bool with_band);

  std::array<QLineSeries*, core::kMemoryKinds> uppers_{};
  std::array<QLineSeries*, core::kMemoryKinds> lowers_{};
  std::array<QAreaSeries*, core::kMemoryKinds> areas_{};
  QLineSeries* budget_ = nullptr;
  QLineSeries* allowed_ = nullptr;
  QLineSeries* floor_ = nullptr;
  QScatterSeries* peak_ = nullptr;
  // Runs of micro-batches too narrow to draw one by one: from each one's low to its peak.
  QLineSeries* band_upper_ = nullptr;
  QLineSeries* band_lower_ = nullptr;
  QAreaSeries* band_ = nullptr;
  // Drawn by hand, not as the scatter's point label: that one is clipped at the plot's edge and
  // leaves stale text behind when the chart redraws only part of itself.
  QGraphicsSimpleTextItem* peak_label_ = nullptr;
  QGraphicsSimpleTextItem* off_scale_label_ = nullptr;
  QLabel* legend_ = nullptr;
  QValueAxis* x_ = nullptr;
  QValueAxis* y_ = nullptr;
  double unit_ = 1 << 20;
  MemoryTimeline timeline_;
};

}  // namespace headroom::gui
