#include "gui/app/compare_dialog.h"

#include <QFileInfo>
#include <QHeaderView>
#include <QVBoxLayout>
#include <QtCharts/QLineSeries>
#include <QtCharts/QValueAxis>
#include <cmath>

#include "core/units.h"

namespace headroom::gui {

namespace {

QString number(double value, int decimals) { return QString::number(value, 'f', decimals); }

QString percent(const report::Change& c) {
  const double f = c.fraction();
  if (std::isinf(f)) return f > 0 ? "new" : "gone";
  return (f >= 0 ? "+" : "") + QString::number(100 * f, 'f', 1) + "%";
}

// Total bytes over the step, drawn as steps, in MiB.
QLineSeries* timeline_series(const MemoryTimeline& timeline, const QString& name) {
  auto* series = new QLineSeries;
  series->setName(name);
  double last = 0;
  for (std::size_t i = 0; i < timeline.time_ms.size(); ++i) {
    std::int64_t total = 0;
    for (const auto b : timeline.bytes[i]) total += b;
    const double mib = static_cast<double>(total) / (1 << 20);
    if (i > 0) series->append(timeline.time_ms[i], last);
    series->append(timeline.time_ms[i], mib);
    last = mib;
  }
  return series;
}

// The layers whose memory changed, a row per changed figure; returns the number of rows.
int fill_layer_table(QTableWidget* table, const report::TraceComparison& comparison) {
  int row = 0;
  for (const auto& layer : comparison.layers) {
    if (layer.status == "same") continue;
    for (const auto& m : layer.memory) {
      if (m.delta() == 0) continue;
      table->insertRow(row);
      const QString name = QString::fromStdString(layer.name) +
                           (layer.status == "changed" ? "" : " (" + QString::fromStdString(layer.status) + ")");
      const QStringList cells = {name, QString::fromStdString(m.what), number(m.base, 0), number(m.next, 0),
                                 (m.delta() >= 0 ? "+" : "") + number(m.delta(), 0), percent(m)};
      for (int col = 0; col < cells.size(); ++col) {
        auto* item = new QTableWidgetItem(cells[col]);
        if (col >= 2) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        table->setItem(row, col, item);
      }
      ++row;
    }
  }
  return row;
}

// The summary `headroom compare` prints, as rich text.
QString summary_html(const report::TraceComparison& c, const QString& base_name, const QString& next_name,
                     bool any_layer_changed) {
  QString text = "<b>" + base_name + "</b> (BASE) against <b>" + next_name + "</b> (NEW), planned with " +
                 QString::fromStdString(core::format_bytes(c.planned.budget_bytes)) + " and batch " +
                 QString::number(c.planned.batch) + "<br>";
  for (const report::Change* s : {&c.activations_per_sample, &c.parameters, &c.step_peak, &c.planned.largest_batch,
                                  &c.planned.samples_per_second}) {
    const int decimals = s->what.find("samples/s") != std::string::npos ? 1 : 0;
    text += QString::fromStdString(s->what) + ": " + number(s->base, decimals) + " &rarr; " + number(s->next, decimals) + " (" +
            percent(*s) + ")<br>";
  }
  if (!c.times_compared) text += QString::fromStdString(c.times_note).toHtmlEscaped() + "<br>";
  for (const auto& w : c.warnings) text += "warning: " + QString::fromStdString(w).toHtmlEscaped() + "<br>";
  text += c.failure.empty() ? "<b>no threshold passed</b> (memory per sample: 1%)"
                            : "<b>threshold passed</b>: " + QString::fromStdString(c.failure).toHtmlEscaped();
  if (!any_layer_changed) text += "<br>no layer's memory changed";
  return text;
}

// The same budget and batch planned on both: each plan's memory over its step.
QChart* plans_memory_chart(const TraceDocument& base, const QString& base_name, const TraceDocument& next,
                           const QString& next_name, const PlanInputs& inputs) {
  auto* chart = new QChart;
  chart->setTitle("Memory over the step, each trace's plan at the same budget and batch");
  double longest = 0, highest = 0;
  for (const auto& [document, name] : {std::pair{&base, "BASE " + base_name}, std::pair{&next, "NEW " + next_name}}) {
    const PlanResult result = compute_plan(*document, inputs);
    if (result.timeline.time_ms.empty()) continue;
    QLineSeries* series = timeline_series(result.timeline, name + (result.plan ? "" : " (nothing fits: best attempt)"));
    chart->addSeries(series);
    // NEW dashed over a wider BASE, so both show where they coincide.
    QPen pen = series->pen();
    pen.setWidthF(chart->series().size() == 1 ? 3.0 : 1.5);
    if (chart->series().size() == 2) pen.setStyle(Qt::DashLine);
    series->setPen(pen);
    longest = std::max(longest, result.timeline.step_ms);
    highest = std::max(highest, static_cast<double>(result.timeline.peak_bytes) / (1 << 20));
  }
  auto* x = new QValueAxis;
  x->setTitleText("ms");
  x->setRange(0, longest > 0 ? longest : 1);
  auto* y = new QValueAxis;
  y->setTitleText("MiB");
  y->setRange(0, highest > 0 ? highest * 1.05 : 1);
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  for (auto* s : chart->series()) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
  return chart;
}

}  // namespace

CompareDialog::CompareDialog(const TraceDocument& base, const TraceDocument& next, const PlanInputs& inputs, QWidget* parent)
    : QDialog(parent) {
  const QString base_name = QFileInfo(QString::fromStdString(base.path)).fileName();
  const QString next_name = QFileInfo(QString::fromStdString(next.path)).fileName();
  setWindowTitle("Compare " + base_name + " with " + next_name);
  report::CompareOptions options;
  options.budget_bytes = inputs.budget_bytes;
  options.batch = inputs.global_batch;
  comparison_ = report::compare_traces(base.trace, next.trace, options);

  table_ = new QTableWidget(this);
  table_->setColumnCount(6);
  table_->setHorizontalHeaderLabels({"layer", "what", "base", "new", "change", "%"});
  table_->verticalHeader()->hide();
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  const int rows = fill_layer_table(table_, comparison_);
  table_->resizeColumnsToContents();

  summary_ = new QLabel(summary_html(comparison_, base_name, next_name, rows > 0), this);
  summary_->setWordWrap(true);

  chart_ = new QChartView(plans_memory_chart(base, base_name, next, next_name, inputs), this);
  chart_->setRenderHint(QPainter::Antialiasing);
  chart_->setMinimumHeight(260);

  auto* layout = new QVBoxLayout(this);
  layout->addWidget(summary_);
  layout->addWidget(table_, 1);
  layout->addWidget(chart_, 1);
  resize(900, 700);
}

}  // namespace headroom::gui
