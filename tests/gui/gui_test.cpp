// The desktop app, headless (QT_QPA_PLATFORM=offscreen): its models, the re-planning worker, the
// main window driven as a user would, running a plan in a real `headroom execute` child, and a
// screenshot of the window.
#include <QAbstractItemModelTester>
#include <QApplication>
#include <QDir>
#include <QJsonDocument>
#include <QMimeData>
#include <QProcess>
#include <QScreen>
#include <QScrollBar>
#include <QScopeGuard>
#include <QSemaphore>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest/QtTest>

#include <sys/stat.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "core/atomic_file.h"
#include "core/collective.h"
#include "core/cost_model.h"
#include "core/plan.h"
#include "core/rescale.h"
#include "core/trace.h"
#include "core/units.h"
#include "runtime/host_info.h"
#include "support/build_paths.h"
#include "support/expand_repeats.h"
#include "support/scoped_env.h"
#include "gui/app/guarded_application.h"
#include "gui/app/main_window.h"
#include "gui/logic/chart_axis.h"
#include "gui/logic/executor_run.h"
#include "gui/logic/layer_table_model.h"
#include "gui/logic/plan_computation.h"
#include "gui/logic/plan_coordinator.h"
#include "gui/logic/recent_files.h"
#include "planner/data_parallel_model.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "planner/strategy_table.h"
#include "simulator/simulator.h"

using namespace headroom;
using namespace headroom::gui;

namespace {

QString committed(const char* name) { return QString::fromUtf8(HEADROOM_TRACES_DIR) + "/" + name; }

PlanInputs inputs(std::int64_t budget, std::int64_t batch) {
  PlanInputs in;
  in.budget_bytes = budget;
  in.global_batch = batch;
  return in;
}

// cpu-mlp.json as JSON, to make bad traces from.
nlohmann::json mlp_json() {
  return nlohmann::json::parse(headroom::core::read_file(committed("cpu-mlp.json").toStdString()));
}

// The trace with its largest profiled batch set to `batch` everywhere a trace records it (the
// batch sizes, each layer's last sample, Tempo's last sample, the last steps), so it is consistent
// and only the size itself can be wrong.
nlohmann::json with_largest_batch(nlohmann::json trace, std::int64_t batch) {
  trace["batch_sizes"].back() = batch;
  for (auto& layer : trace["layers"]) {
    layer["samples"].back()["batch"] = batch;
    if (layer.contains("tempo")) layer["tempo"]["samples"].back()["batch"] = batch;
  }
  trace["steps"].back()["batch"] = batch;
  if (trace.contains("tempo_steps") && !trace["tempo_steps"].empty()) trace["tempo_steps"].back()["batch"] = batch;
  return trace;
}

QString write_json(const QTemporaryDir& dir, const char* name, const nlohmann::json& json) {
  const QString path = dir.filePath(name);
  headroom::core::write_file_atomically(path.toStdString(), json.dump());
  return path;
}

// Takes one permit, running the event loop meanwhile (results come back through it).
bool acquire(QSemaphore& semaphore) {
  QElapsedTimer clock;
  clock.start();
  while (!semaphore.tryAcquire()) {
    if (clock.elapsed() > 10000) return false;
    QTest::qWait(5);
  }
  return true;
}

// Sets the budget through the exact field, as a user typing it and pressing Enter would.
void type_budget(MainWindow& window, const QString& text) {
  QLineEdit* field = window.budget_control()->field();
  field->setText(text);
  field->setModified(true);
  emit field->editingFinished();
}

// With HEADROOM_GUI_SHOTS=DIR set, saves the window as DIR/NAME.png, to look at each state.
void save_shot(QWidget& window, const char* name) {
  const QByteArray dir = qgetenv("HEADROOM_GUI_SHOTS");
  if (dir.isEmpty()) return;
  QTest::qWait(50);
  window.grab().save(QString::fromLocal8Bit(dir) + "/" + name + ".png");
}

// What is on the screen (under X: what the window system shows, stale pieces of earlier frames
// included, which grab() would redraw away).
void save_screen_shot(QWidget& window, const char* name) {
  const QByteArray dir = qgetenv("HEADROOM_GUI_SHOTS");
  if (dir.isEmpty() || QGuiApplication::platformName() != "xcb") return;
  QTest::qWait(300);
  QGuiApplication::primaryScreen()->grabWindow(window.winId()).save(QString::fromLocal8Bit(dir) + "/" + name + ".png");
}

// The peak label's box in the chart's coordinates, where plotArea() is.
QRectF label_box(const QGraphicsSimpleTextItem* label) { return label->mapRectToParent(label->boundingRect()); }

// Waits until the window shows the plan of the latest request (several may have been coalesced).
bool settle(MainWindow& window) {
  QElapsedTimer clock;
  clock.start();
  while (window.coordinator().busy() && clock.elapsed() < 30000) QTest::qWait(10);
  QTest::qWait(20);
  return !window.coordinator().busy();
}

// The window at the size the screenshots use, showing `trace`'s plan.
bool shown_with_file(MainWindow& window, const QString& path) {
  window.resize(1400, 880);
  window.show();
  return window.open_trace(path) && settle(window);
}
bool shown_with(MainWindow& window, const char* trace) { return shown_with_file(window, committed(trace)); }

}  // namespace

class GuiTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QApplication::setOrganizationName("headroom-tests");
    // ctest runs each test function as a process of its own, two at a time: each needs settings
    // (the recent files) of its own, or one's clear() empties the other's list mid-test.
    QApplication::setApplicationName("headroom-gui-tests-" + QString::number(QCoreApplication::applicationPid()));
    QSettings().clear();
  }

  void cleanupTestCase() {
    QSettings settings;
    settings.clear();
    settings.sync();
    QFile::remove(settings.fileName());
  }

  void layerTableModelPassesTheModelTesterAndSortsByValue() {
    LayerTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSortFilterProxyModel proxy;
    proxy.setSourceModel(&model);
    proxy.setSortRole(LayerTableModel::kSortRole);
    QAbstractItemModelTester proxy_tester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);

    const auto trace = load_trace_document(committed("cpu-bert.json").toStdString());
    model.set_trace(trace);
    QCOMPARE(model.rowCount(), static_cast<int>(trace->trace.layers.size()));
    QCOMPARE(model.columnCount(), static_cast<int>(LayerTableModel::ColumnCount));
    QCOMPARE(model.data(model.index(0, LayerTableModel::Choice)).toString(), QString("-"));

    PlanInputs checkpointing_only = inputs(450ll << 20, 32);
    checkpointing_only.strategies = {headroom::planner::Strategy::Checkpointing};
    const PlanResult result = compute_plan(*trace, checkpointing_only);
    QVERIFY(result.plan);
    QVERIFY(!result.plan->choice.checkpointed_blocks.empty());
    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    model.set_plan(result.plan);
    QCOMPARE(changed.count(), 1);
    QCOMPARE(model.timing_batch(), result.plan->choice.micro_batches.front());
    int checkpointed = 0;
    for (int row = 0; row < model.rowCount(); ++row) {
      checkpointed += model.data(model.index(row, LayerTableModel::Choice)).toString() == "checkpointed";
    }
    QVERIFY(checkpointed > 0);

    // Sorting by parameters: the largest first, by value, not by the formatted text.
    proxy.sort(LayerTableModel::Params, Qt::DescendingOrder);
    std::int64_t largest = 0;
    for (const auto& layer : trace->trace.layers) largest = std::max(largest, layer.param_bytes);
    QCOMPARE(proxy.data(proxy.index(0, LayerTableModel::Params), LayerTableModel::kSortRole).toLongLong(), largest);
    for (int row = 1; row < proxy.rowCount(); ++row) {
      QVERIFY(proxy.data(proxy.index(row - 1, LayerTableModel::Params), LayerTableModel::kSortRole).toLongLong() >=
              proxy.data(proxy.index(row, LayerTableModel::Params), LayerTableModel::kSortRole).toLongLong());
    }
    proxy.sort(LayerTableModel::BackwardTime, Qt::AscendingOrder);
    for (int row = 1; row < proxy.rowCount(); ++row) {
      QVERIFY(proxy.data(proxy.index(row - 1, LayerTableModel::BackwardTime), LayerTableModel::kSortRole).toLongLong() <=
              proxy.data(proxy.index(row, LayerTableModel::BackwardTime), LayerTableModel::kSortRole).toLongLong());
    }
    model.set_plan(std::nullopt);
    model.set_trace(nullptr);
    QCOMPARE(model.rowCount(), 0);
  }

  void computedPlanTimelineAndThroughputAgree() {
    const auto trace = load_trace_document(committed("cpu-bert.json").toStdString());
    const PlanResult result = compute_plan(*trace, inputs(300ll << 20, 32));
    QVERIFY(result.plan);
    // The simulated step peaks where the planner predicted.
    QCOMPARE(result.timeline.peak_bytes, result.plan->predicted.peak_bytes);
    QVERIFY(result.timeline.time_ms.size() > 10);
    QVERIFY(result.timeline.time_ms.size() <= 802);
    std::int64_t highest = 0;
    for (const auto& bytes : result.timeline.bytes) {
      std::int64_t total = 0;
      for (const auto b : bytes) total += b;
      highest = std::max(highest, total);
    }
    QCOMPARE(highest, result.timeline.peak_bytes);
    // One point per micro-batch size, the chosen one fits and is the plan's throughput.
    QCOMPARE(result.throughput.points.size(), std::size_t{11});
    QVERIFY(result.throughput.chosen >= 0);
    const auto& chosen = result.throughput.points[static_cast<std::size_t>(result.throughput.chosen)];
    QVERIFY(chosen.fits);
    QCOMPARE(chosen.micro_batch, result.plan->choice.micro_batches.front());
    QCOMPARE(chosen.samples_per_second, result.plan->predicted.samples_per_second);
    QVERIFY(QString::fromStdString(result.summary).contains("predicted peak"));

    const PlanResult none = compute_plan(*trace, inputs(1 << 20, 32));
    QVERIFY(!none.plan);
    QVERIFY(none.smallest_budget > 1 << 20);
    QVERIFY(QString::fromStdString(none.infeasible_reason).contains("the budget must be at least"));
    QCOMPARE(none.throughput.chosen, -1);
    const PlanResult bad = compute_plan(*trace, inputs(300ll << 20, 0));
    QVERIFY(QString::fromStdString(bad.error).startsWith("Global batch: "));
    QVERIFY(!QString::fromStdString(bad.error).contains("--"));
  }

  // Runs of identical micro-batches are binned from their first one, shifted: the chart's points
  // are exactly those of the step written out micro-batch by micro-batch, at any number of them
  // and bins, and stay within the bins.
  void timelineOfRepeatedMicroBatchesIsTheWrittenOutOne() {
    const auto trace = load_trace_document(committed("cpu-bert.json").toStdString());
    const core::CostModel costs(trace->trace);
    const planner::LayerGraph graph(trace->trace);
    std::vector<std::string> names;
    for (const auto& layer : trace->trace.layers) names.push_back(layer.name);
    for (const std::size_t n : {2, 3, 50, 700, 2000}) {
      // Two sizes: two runs, each repeated but for the last micro-batch.
      std::vector<std::int64_t> sizes(n, 5);
      std::fill(sizes.begin() + static_cast<std::ptrdiff_t>(n / 2), sizes.end(), 4);
      const auto schedule = planner::build_schedule(costs, graph, core::StepChoice{}.with_micro_batches(sizes));
      const auto copies = testing::expand_repeats(schedule);
      const auto sim = simulator::simulate(schedule);
      const auto written_sim = simulator::simulate(copies);
      for (const int bins : {800, 37}) {
        const MemoryTimeline repeated = memory_timeline(schedule, sim, names, n, bins);
        const MemoryTimeline written = memory_timeline(copies, written_sim, names, n, bins);
        QVERIFY2(repeated.time_ms == written.time_ms, qPrintable(QString("%1 micro-batches, %2 bins").arg(n).arg(bins)));
        QVERIFY(repeated.bytes == written.bytes);
        QVERIFY(repeated.time_ms.size() <= static_cast<std::size_t>(bins) + 2);
        QCOMPARE(repeated.peak_bytes, written.peak_bytes);
        QCOMPARE(repeated.peak_time_ms, written.peak_time_ms);
        QCOMPARE(repeated.step_ms, written.step_ms);
        QCOMPARE(repeated.tasks.size(), schedule.tasks.size());
      }
    }
    // At 20,000 micro-batches: the hover inside the run names the micro-batch under the cursor.
    const auto schedule = planner::build_schedule(costs, graph, core::StepChoice{}.with_micro_batches(std::vector<std::int64_t>(20'000, 5)));
    const MemoryTimeline t = memory_timeline(schedule, simulator::simulate(schedule), names, 20'000);
    QVERIFY(t.time_ms.size() <= 802);
    QCOMPARE(t.repeats.size(), std::size_t{1});
    const RepeatSpan& run = t.repeats.front();
    QCOMPARE(run.times, std::int64_t{19'999});
    const double at = run.start_ms + 12'345.5 * run.period_ms;
    const QString text = QString::fromStdString(memory_hover_text(t, at));
    QVERIFY2(text.contains("(micro-batch 12346 of 20000)"), qPrintable(text));
  }

  // The window at thousands of micro-batches: the memory chart draws as many points as at a few.
  void memoryChartAtThousandsOfMicroBatches() {
    MainWindow window;
    QVERIFY(shown_with(window, "cpu-bert.json"));
    // Splits evenly at every micro-batch size the trace's times may make fastest (1 to 6, 8, 10, 12).
    window.batch_box()->setValue(24'000);
    type_budget(window, "241MiB");
    QVERIFY(settle(window));
    const PlanResult* r = window.current_result();
    QVERIFY(r->plan);
    QVERIFY(r->plan->choice.micro_batches.size() >= 1000);
    QVERIFY(window.memory_chart()->top_series()->count() <= 2 * 802);
    QCOMPARE(r->timeline.peak_bytes, r->plan->predicted.peak_bytes);
    // After the first micro-batch, the band from the level between micro-batches to their peak.
    QCOMPARE(r->timeline.repeats.size(), std::size_t{1});
    const RepeatSpan& run = r->timeline.repeats.front();
    QVERIFY(run.banded);
    QVERIFY(run.low_bytes < run.peak_bytes);
    const QLineSeries* band = window.memory_chart()->band_series();
    QCOMPARE(band->count(), 4);
    const double unit = window.memory_chart()->bytes_per_unit();
    QCOMPARE(band->at(0), QPointF(run.start_ms + run.period_ms, double(run.low_bytes) / unit));
    QCOMPARE(band->at(2), QPointF(run.end_ms, double(run.peak_bytes) / unit));
    QVERIFY(window.memory_chart()->legend()->text().contains("repeated"));
    save_shot(window, "many-micro-batches");
    // A few micro-batches are drawn one by one: no band.
    window.batch_box()->setValue(32);
    QVERIFY(settle(window));
    QCOMPARE(window.memory_chart()->band_series()->count(), 0);
    QVERIFY(!window.memory_chart()->legend()->text().contains("repeated"));
  }

  // A plan that won a tie the trace's timings cannot break says so in the summary: bert with a fixed
  // cost per micro-batch, each size's median 5% off, where larger micro-batches with checkpointing
  // run about as fast as smaller ones without.
  void aTieTheTraceCannotResolveIsExplained() {
    nlohmann::json trace = nlohmann::json::parse(headroom::core::read_file(committed("cpu-bert.json").toStdString()));
    const std::int64_t overhead = trace["steps"].back()["sequence"]["micro_batch_ns"].get<std::int64_t>() / 2;
    for (auto& step : trace["steps"]) {
      for (const char* part : {"micro_batch_ns", "first_micro_batch_ns"}) {
        step["sequence"][part] = step["sequence"][part].get<std::int64_t>() + overhead;
      }
      step["sequence"]["micro_batch_error"] = 0.05;
    }
    QTemporaryDir dir;
    MainWindow window;
    QVERIFY(shown_with_file(window, write_json(dir, "bert-coarse-times.json", trace)));
    window.batch_box()->setValue(64);
    QVERIFY(settle(window));
    bool explained = false;
    for (const char* budget : {"300MiB", "350MiB", "450MiB", "600MiB"}) {
      type_budget(window, budget);
      QVERIFY(settle(window));
      if (!window.summary_text().contains("less than the trace's timings resolve (14.1%")) continue;
      explained = true;
      QVERIFY2(window.summary_text().contains("the fewer checkpointed blocks taken"), qPrintable(window.summary_text()));
      save_shot(window, "tie-explained");
      break;
    }
    QVERIFY2(explained, qPrintable(window.summary_text()));
  }

  void budgetSliderIsLogarithmicAndRoundTrips() {
    const auto trace = load_trace_document(committed("cpu-bert.json").toStdString());
    const BudgetRange range = budget_range(trace->trace, 32);
    QVERIFY(range.least_bytes < range.whole_batch_bytes);
    QVERIFY(range.most_bytes >= range.device_bytes);
    QCOMPARE(budget_to_slider(range.least_bytes, range), 0);
    QCOMPARE(budget_to_slider(range.most_bytes, range), kBudgetSliderSteps);
    const std::int64_t budget = 300ll << 20;
    QVERIFY(std::llabs(slider_to_budget(budget_to_slider(budget, range), range) - budget) < budget / 100);
  }

  void replanRequestsCoalesceAndStaleResultsAreDropped() {
    QSemaphore started, release;
    std::mutex mutex;
    std::vector<quint64> computed;
    PlanCoordinator coordinator([&](const PlanJob& job) {
      {
        const std::lock_guard lock(mutex);
        computed.push_back(job.generation);
      }
      started.release();
      release.acquire();  // held until the test lets this job finish
      PlanResult r;
      r.inputs = job.inputs;
      return r;
    });
    // On a failed check, let any held job finish so the coordinator's thread can stop.
    const auto unblock = qScopeGuard([&] { release.release(100); });
    QSignalSpy ready(&coordinator, &PlanCoordinator::planReady);
    QSignalSpy dropped(&coordinator, &PlanCoordinator::staleDropped);
    const auto trace = std::make_shared<const TraceDocument>();

    // Alone, a result is shown.
    QCOMPARE(coordinator.request(trace, inputs(1, 1)), quint64{1});
    QVERIFY(acquire(started));
    release.release();
    QVERIFY(ready.wait(10000));
    QCOMPARE(ready.takeFirst().at(0).value<quint64>(), quint64{1});

    // While generation 2 runs, 3 and 4 arrive: 3 is never computed, 2's result is stale.
    coordinator.request(trace, inputs(2, 2));
    QVERIFY(acquire(started));
    coordinator.request(trace, inputs(3, 3));
    coordinator.request(trace, inputs(4, 4));
    QVERIFY(coordinator.busy());
    release.release();  // 2 finishes: dropped, and 4 starts
    QVERIFY(acquire(started));
    release.release();
    QVERIFY(ready.wait(10000));
    QCOMPARE(dropped.count(), 1);
    QCOMPARE(dropped.at(0).at(0).value<quint64>(), quint64{2});
    QCOMPARE(ready.count(), 1);
    const auto shown = ready.at(0).at(1).value<std::shared_ptr<const PlanResult>>();
    QCOMPARE(ready.at(0).at(0).value<quint64>(), quint64{4});
    QCOMPARE(shown->inputs.budget_bytes, std::int64_t{4});
    {
      const std::lock_guard lock(mutex);
      QCOMPARE(computed, (std::vector<quint64>{1, 2, 4}));
    }
    QCOMPARE(coordinator.dropped(), 1);
    QVERIFY(!coordinator.busy());
  }

  void executorProgressLinesParse() {
    const auto p = parse_executor_progress("executing: step 2/3", 1, 3);
    QVERIFY(p);
    QCOMPARE(p->total, 5);
    QCOMPARE(p->done, 3);  // gradient check, warm-up, step 1
    QCOMPARE(parse_executor_progress("executing: warm-up 1/1", 1, 3)->done, 1);
    QCOMPARE(parse_executor_progress("executing: gradient check", 1, 3)->done, 0);
    QVERIFY(!parse_executor_progress("headroom: out of memory", 1, 3));
  }

  void mainWindowReplansWhenTheBudgetMoves() {
    MainWindow window;
    QVERIFY(shown_with(window, "cpu-bert.json"));
    const PlanResult* first = window.current_result();
    QVERIFY(first);
    QVERIFY(first->plan);
    const std::int64_t first_budget = first->inputs.budget_bytes;
    const std::int64_t first_peak = first->plan->predicted.peak_bytes;
    const auto first_micro = first->plan->choice.micro_batches.front();
    const auto tempo_layers = [](const headroom::core::Plan& plan) {
      return plan.choice.tempo_count();
    };
    const auto first_tempo = tempo_layers(*first->plan);
    const QString first_summary = window.summary_text();
    const auto first_fits = window.throughput_chart()->feasible_series()->count();
    QCOMPARE(window.memory_chart()->budget_series()->at(0).y() * window.memory_chart()->bytes_per_unit(),
             double(first_budget));

    // Drag the budget down a good way, as a user would: the plan, the charts and the table follow.
    QSlider* slider = window.budget_control()->slider();
    const auto trace = window.trace();
    const BudgetRange range = budget_range(trace->trace, window.batch_box()->value());
    // From the least budget a plan without L2L fits: above it "all" never uses L2L.
    PlanInputs on_the_device = inputs(1, window.batch_box()->value());
    on_the_device.strategies.erase(headroom::planner::Strategy::L2L);
    const std::int64_t least = compute_plan(*trace, on_the_device).smallest_budget;
    QVERIFY(least < first_budget);
    const std::int64_t target = least + (first_budget - least) / 4;
    slider->setValue(budget_to_slider(target, range));
    QVERIFY(settle(window));
    const PlanResult* second = window.current_result();
    // A new result, told by what it holds: the first may be freed by now (intermediate re-plans while
    // the slider moved) and its address reused, so the pointers need not differ.
    QVERIFY(second->inputs.budget_bytes != first_budget);
    const std::int64_t budget = window.budget_control()->budget();
    QCOMPARE(second->inputs.budget_bytes, budget);
    QVERIFY(budget < first_budget);
    QVERIFY(second->plan);
    QVERIFY(second->plan->predicted.peak_bytes <= budget);
    QVERIFY(second->plan->predicted.peak_bytes <= first_peak);
    // Less room never means a larger micro-batch or fewer memory-saving choices.
    QVERIFY(second->plan->choice.micro_batches.front() <= first_micro);
    QVERIFY(second->plan->choice.micro_batches.front() < first_micro || !second->plan->choice.checkpointed_blocks.empty() ||
            tempo_layers(*second->plan) >= first_tempo);
    QVERIFY(window.summary_text() != first_summary);
    QVERIFY(window.summary_text().contains(QString::fromStdString(core::format_bytes(budget))));
    QCOMPARE(window.memory_chart()->budget_series()->at(0).y() * window.memory_chart()->bytes_per_unit(), double(budget));
    QCOMPARE(window.memory_chart()->peak_series()->at(0).y() * window.memory_chart()->bytes_per_unit(),
             double(second->plan->predicted.peak_bytes));
    QVERIFY(window.memory_chart()->top_series()->count() > 10);
    QVERIFY(window.throughput_chart()->feasible_series()->count() < first_fits);
    QVERIFY(window.throughput_chart()->infeasible_series()->count() > 0);
    QCOMPARE(window.throughput_chart()->chosen_series()->count(), 1);
    QCOMPARE(window.throughput_chart()->chosen_series()->at(0).y(), second->plan->predicted.samples_per_second);
    QCOMPARE(window.layer_model()->timing_batch(), second->plan->choice.micro_batches.front());

    // The exact field takes what --budget takes.
    QLineEdit* field = window.budget_control()->field();
    field->setText("1GiB");
    field->setModified(true);
    emit field->editingFinished();
    QVERIFY(settle(window));
    QCOMPARE(window.current_result()->inputs.budget_bytes, std::int64_t{1} << 30);

    // Another optimizer: planned with its state estimated, and the plan says so.
    window.optimizer_box()->setCurrentText("sgd");
    QVERIFY(settle(window));
    QCOMPARE(window.current_result()->inputs.optimizer, std::string("sgd"));
    QVERIFY(window.current_result()->plan);
    QVERIFY(window.summary_text().contains("optimizer state estimated, not measured: profile with --optimizer sgd"));

    // Recent files remember it.
    QCOMPARE(recent_files().value(0), QFileInfo(committed("cpu-bert.json")).absoluteFilePath());
    QVERIFY(window.recent_menu_text().contains("cpu-bert.json"));

    // Data parallel: two workers share the batch over the typed link; each keeps its buckets.
    QVERIFY(!window.link_edit()->isEnabled());
    window.link_edit()->setText("1GB/s,20us");
    window.devices_box()->setValue(2);
    QVERIFY(window.link_edit()->isEnabled());
    emit window.link_edit()->editingFinished();
    QVERIFY(settle(window));
    QCOMPARE(window.current_result()->inputs.workers, 2);
    QVERIFY(window.current_result()->plan);
    QCOMPARE(window.current_result()->plan->choice.workers(), 2);
    QCOMPARE(window.current_result()->plan->choice.data_parallel->link.bytes_per_second, 1e9);
    QVERIFY(window.summary_text().contains("data parallel    2 workers"));
    // Each shard stage the trace can run, beside the one chosen.
    QVERIFY(window.summary_text().contains("each shard stage, planned alike"));
    QVERIFY(window.summary_text().contains("stage 1 (optimizer state sharded)"));
    // No stage-3 plan: nothing is gathered, and the legend does not name it.
    QVERIFY(!window.memory_chart()->legend()->text().contains("gathered"));
    save_shot(window, "devices");
    window.devices_box()->setValue(1);
    QVERIFY(settle(window));
    QCOMPARE(window.current_result()->plan->choice.workers(), 1);
  }

  // Two workers at a budget only ZeRO's stage 3 fits: the plan shards the parameters, and the
  // memory chart shows each unit's gathered parameters as a band of their own.
  void aStageThreePlanShowsTheGatheredParameters() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    nlohmann::json edited = nlohmann::json::parse(headroom::core::read_file(committed("cpu-gpt.json").toStdString()));
    // What a trace profiled since sharding records, which stages 2 and 3 need.
    edited["optimizer"]["param_tensors"] = 30;
    edited["optimizer"]["largest_param_elements"] = 1 << 20;
    const QString path = dir.filePath("gpt.json");
    headroom::core::write_file_atomically(path.toStdString(), edited.dump());
    MainWindow window;
    window.resize(1400, 880);
    window.show();
    QVERIFY(window.open_trace(path));
    QVERIFY(settle(window));
    window.link_edit()->setText("1GB/s,20us");
    window.devices_box()->setValue(2);
    emit window.link_edit()->editingFinished();
    QVERIFY(settle(window));
    PlanInputs at = window.current_result()->inputs;
    at.budget_bytes = 1;
    const auto none = planner::plan_step(window.trace()->trace, plan_request(*window.trace(), at));
    // Stage 3 twice, gathering per block and per layer.
    QCOMPARE(none.shard_stages.size(), std::size_t{5});
    const std::int64_t least = std::min(none.shard_stages[3].smallest_budget, none.shard_stages[4].smallest_budget);
    QVERIFY(least < none.shard_stages[2].smallest_budget);
    QLineEdit* field = window.budget_control()->field();
    field->setText(QString::number(least));
    field->setModified(true);
    emit field->editingFinished();
    QVERIFY(settle(window));
    const PlanResult* result = window.current_result();
    QVERIFY(result->plan);
    QCOMPARE(result->plan->choice.data_parallel->shard_stage, 3);
    const std::string marked = std::string(" (optimizer state, gradients and parameters sharded), per ") +
                               std::string(core::gather_unit_name(result->plan->choice.data_parallel->gather)) + " *";
    QVERIFY(window.summary_text().contains(QString::fromStdString(marked)));
    std::int64_t gathered = 0;
    for (const auto& point : result->timeline.bytes) {
      gathered = std::max(gathered, point[static_cast<std::size_t>(core::MemoryKind::GatheredParameter)]);
    }
    QVERIFY(gathered > 0);
    QVERIFY(window.memory_chart()->legend()->text().contains("gathered&nbsp;parameters"));
    save_shot(window, "stage3");
    // A measured link whose collectives take their time from the compute (link.beside_compute):
    // what the compute loses is a task of its own after each micro-batch, named on hover.
    edited["link"] = {{"bytes_per_second", 1e9}, {"latency_ns", 20000}, {"source", "measured"}, {"beside_compute", 1.0}};
    const QString shared = dir.filePath("gpt-shared.json");
    headroom::core::write_file_atomically(shared.toStdString(), edited.dump());
    MainWindow measured;
    measured.resize(1400, 880);
    measured.show();
    QVERIFY(measured.open_trace(shared));
    QVERIFY(settle(measured));
    measured.devices_box()->setValue(2);
    QVERIFY(settle(measured));
    QLineEdit* budget = measured.budget_control()->field();
    budget->setText(QString::number(least));
    budget->setModified(true);
    emit budget->editingFinished();
    QVERIFY(settle(measured));
    const PlanResult* slowed = measured.current_result();
    QVERIFY(slowed->plan);
    QVERIFY(slowed->plan->predicted_part(core::kComputeBesideCollectivesSecondsPart).value_or(0) > 0);
    const auto& timeline = slowed->timeline;
    const auto category = std::find(timeline.categories.begin(), timeline.categories.end(), planner::kBesideComputeCategory);
    QVERIFY(category != timeline.categories.end());
    const auto index = static_cast<std::size_t>(category - timeline.categories.begin());
    const auto task = std::find_if(timeline.tasks.begin(), timeline.tasks.end(), [&](const auto& t) { return t.category == index; });
    QVERIFY(task != timeline.tasks.end());
    const std::string hover = memory_hover_text(timeline, (task->start_ms + task->end_ms) / 2);
    QVERIFY2(hover.find(std::string(planner::kBesideComputeCategory)) != std::string::npos, hover.c_str());
    save_shot(measured, "stage3-slowed");
  }

  // The open trace against a second one, as `headroom compare` shows it: the layer whose
  // memory grew first in the table with its change, the summary planned with the window's budget
  // and batch, the two plans' memory overlaid; a trace that cannot be compared is an error shown.
  void compareWithASecondTraceShowsTheLayerThatGrew() {
    MainWindow window;
    window.resize(1400, 880);
    window.show();
    QVERIFY(window.open_trace(committed("cpu-bert.json")));
    QVERIFY(settle(window));
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    nlohmann::json edited = nlohmann::json::parse(headroom::core::read_file(committed("cpu-bert.json").toStdString()));
    for (auto& layer : edited["layers"]) {
      if (layer["name"] != "layer2.ffn_in") continue;
      for (auto& sample : layer["samples"]) {
        sample["kept_bytes"] = static_cast<std::int64_t>(std::llround(sample["kept_bytes"].get<double>() * 1.05));
      }
    }
    const QString grown = dir.filePath("grown.json");
    headroom::core::write_file_atomically(grown.toStdString(), edited.dump());
    CompareDialog* dialog = window.compare_with(grown);
    QVERIFY(dialog != nullptr);
    QCOMPARE(dialog->layer_table()->item(0, 0)->text(), QString("layer2.ffn_in"));
    QCOMPARE(dialog->layer_table()->item(0, 5)->text(), QString("+5.0%"));
    QCOMPARE(dialog->layer_table()->rowCount(), 1);
    QCOMPARE(dialog->chart_view()->chart()->series().size(), 2);
    QVERIFY(dialog->summary()->text().contains("threshold passed</b>: layer layer2.ffn_in"));
    QCOMPARE(dialog->comparison().planned.budget_bytes, window.current_result()->inputs.budget_bytes);
    save_shot(*dialog, "compare-dialog");
    dialog->close();

    QVERIFY(window.compare_with(dir.filePath("missing.json")) == nullptr);
    QVERIFY(window.error_text().contains("missing.json"));
  }

  // No trace, however bad, takes the window down or the plan on screen away. Each one is
  // refused with an error in the window naming the file, and the field where there is one.
  void badTracesShowTheErrorAndKeepThePlan() {
    MainWindow window;
    window.resize(1400, 880);
    window.show();
    QVERIFY(window.open_trace(committed("cpu-mlp.json")));
    QVERIFY(settle(window));
    QVERIFY(window.current_result()->plan);
    const core::Plan good_plan = *window.current_result()->plan;
    const QString good_summary = window.summary_text();
    const quint64 good_generation = window.coordinator().latest_generation();
    QVERIFY(window.error_text().isEmpty());

    QTemporaryDir dir;
    struct Bad {
      QString path;
      QString words;  // what the error must say besides the file's name: the field, or the reason
    };
    std::vector<Bad> bad;
    const QString malformed = dir.filePath("malformed.json");
    const std::string text = headroom::core::read_file(committed("cpu-mlp.json").toStdString());
    headroom::core::write_file_atomically(malformed.toStdString(), text.substr(0, text.size() / 2));
    bad.push_back({malformed, "malformed JSON"});
    bad.push_back({write_json(dir, "plan-not-trace.json", {{"schema", "headroom.plan/1"}}), "schema"});
    nlohmann::json missing = mlp_json();
    missing.erase("batch_sizes");
    bad.push_back({write_json(dir, "missing-field.json", missing), "batch_sizes"});
    nlohmann::json missing_in_layer = mlp_json();
    missing_in_layer["layers"][3].erase("param_bytes");
    bad.push_back({write_json(dir, "missing-layer-field.json", missing_in_layer), "layers[3].param_bytes"});
    nlohmann::json duplicate = mlp_json();
    duplicate["layers"][2]["name"] = duplicate["layers"][0]["name"];
    bad.push_back({write_json(dir, "duplicate-names.json", duplicate), "layers[2].name"});
    const QString fifo = dir.filePath("fifo.json");
    QCOMPARE(::mkfifo(fifo.toLocal8Bit().constData(), 0600), 0);
    bad.push_back({fifo, "not a regular file"});
    QVERIFY(QDir(dir.path()).mkdir("directory.json"));
    bad.push_back({dir.filePath("directory.json"), "not a regular file"});
    bad.push_back({dir.filePath("absent.json"), "no such file"});
    // The issue's row, last so the screenshot shows it: 2^63-1 aborted the app ("terminate called
    // after throwing ... InputError").
    bad.push_back({write_json(dir, "batch-int64-max.json", with_largest_batch(mlp_json(), std::numeric_limits<std::int64_t>::max())),
                   "batch_sizes[6]"});

    for (const Bad& b : bad) {
      QVERIFY2(!window.open_trace(b.path), qPrintable(b.path));
      QVERIFY(window.isVisible());
      const QString error = window.error_text();
      QVERIFY2(error.contains(QFileInfo(b.path).fileName()) && error.contains(b.words), qPrintable(error));
      QVERIFY(window.error_label()->isVisible());
      // The previous trace and its plan, untouched: no re-plan was even asked for.
      QVERIFY(QString::fromStdString(window.trace()->path).endsWith("cpu-mlp.json"));
      QCOMPARE(window.coordinator().latest_generation(), good_generation);
      QVERIFY(window.current_result()->plan);
      QVERIFY(*window.current_result()->plan == good_plan);
      QCOMPARE(window.summary_text(), good_summary);
      QVERIFY(window.windowTitle().endsWith("cpu-mlp.json"));
    }
    save_shot(window, "bad-trace");
    // Opening a good trace clears the error.
    QVERIFY(window.open_trace(committed("cpu-mlp.json")));
    QVERIFY(window.error_text().isEmpty());
    QVERIFY(!window.error_label()->isVisible());
  }

  // The largest batch the trace format takes (kMaxTraceBatch) loads; doubling it for the starting
  // batch asked the planner for more than it takes, and that InputError escaped and aborted the app.
  void traceAtTheLargestBatchOpensAndPlans() {
    QTemporaryDir dir;
    const QString path = write_json(dir, "batch-max.json", with_largest_batch(mlp_json(), core::kMaxTraceBatch));
    MainWindow window;
    window.show();
    QVERIFY2(window.open_trace(path), qPrintable(window.error_text()));
    QVERIFY(settle(window));
    QCOMPARE(window.batch_box()->value(), static_cast<int>(headroom::planner::kMaxGlobalBatch));
    QVERIFY(window.current_result());
    QVERIFY2(window.current_result()->plan || !window.current_result()->infeasible_reason.empty(),
             qPrintable(QString::fromStdString(window.current_result()->error)));
  }

  // Sizes that load but are far past anything that fits (every byte count at the trace format's
  // bound): the window plans them, or shows why nothing fits or why it cannot plan, and stays.
  void traceOfHugeSizesShowsWhyAndStays() {
    nlohmann::json trace = mlp_json();
    for (auto& layer : trace["layers"]) {
      layer["param_bytes"] = core::kMaxTraceBytes;
      for (auto& sample : layer["samples"]) {
        for (auto& [key, value] : sample.items()) {
          if (key.ends_with("_bytes")) value = value.get<std::int64_t>() < 0 ? -core::kMaxTraceBytes : core::kMaxTraceBytes;
          if (key.ends_with("_ns")) value = core::kMaxTraceNs;
        }
      }
    }
    QTemporaryDir dir;
    const QString path = write_json(dir, "huge-sizes.json", trace);
    MainWindow window;
    window.show();
    QVERIFY2(window.open_trace(path), qPrintable(window.error_text()));
    QVERIFY(settle(window));
    QVERIFY(window.isVisible());
    const PlanResult* r = window.current_result();
    QVERIFY(r);
    QVERIFY2(r->plan || !r->infeasible_reason.empty() || !r->error.empty(), qPrintable(window.summary_text()));
  }

  // The last resort: an exception out of an event handler is shown, and the event loop goes on.
  void anExceptionEscapingASlotIsShownNotFatal() {
    auto* app = qobject_cast<GuardedApplication*>(QCoreApplication::instance());
    QVERIFY(app);
    MainWindow window;
    window.show();
    QVERIFY(window.open_trace(committed("cpu-mlp.json")));
    QVERIFY(settle(window));
    // As headroom-gui's main connects it.
    QObject::connect(app, &GuardedApplication::uncaughtError, &window,
                     [&window](const QString& message) { window.show_error("Unexpected error (the action was abandoned)", message); });
    QTimer::singleShot(0, &window, [] { throw std::runtime_error("thrown by a slot"); });
    QTRY_VERIFY(window.error_text().contains("thrown by a slot"));
    // The window still works: a change of a control re-plans.
    window.batch_box()->setValue(window.batch_box()->value() + 1);
    QVERIFY(settle(window));
    QCOMPARE(window.current_result()->inputs.global_batch, static_cast<std::int64_t>(window.batch_box()->value()));
  }

  void droppingATraceOpensIt() {
    MainWindow window;
    window.show();
    QMimeData data;
    data.setUrls({QUrl::fromLocalFile(committed("cpu-gpt.json"))});
    QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &data, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&window, &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &data, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&window, &drop);
    QVERIFY(window.trace());
    QVERIFY(QString::fromStdString(window.trace()->path).endsWith("cpu-gpt.json"));
    QVERIFY(settle(window));
    QVERIFY(window.current_result());
  }

  // A trace from a machine far faster than this one: the app times this machine with `headroom
  // calibrate`, says how they compare and plans with the times rescaled to it, as `headroom plan`.
  void aTraceFromAnotherMachineIsRescaledToThisOne() {
    QTemporaryDir dir;
    // A quiet machine, whatever else runs beside the test (ctest's other tests): the timing is
    // compared, not refused (a busy one is aTimingTakenBesideOtherWorkIsNotCompared's subject). The
    // child inherits both; the timing it keeps goes to the test's folder, not the user's cache.
    const headroom::testing::ScopedEnv cache_home("XDG_CACHE_HOME", dir.filePath("cache").toStdString());
    const headroom::testing::ScopedEnv quiet(headroom::runtime::kAssumedOthersVariable, "0");
    nlohmann::json document = nlohmann::json::parse(headroom::core::read_file(committed("cpu-gpt.json").toStdString()));
    document["calibration"] = {{"device", "a much faster machine"},
                               {"threads", 1},
                               {"measured_at", "2026-11-25T00:00:00Z"},
                               {"runs", {{{"matmul_flops_per_s", 1e14}, {"conv_flops_per_s", 1e14}, {"memory_bytes_per_s", 1e13}}}}};
    const QString path = dir.filePath("fast.json");
    headroom::core::write_file_atomically(path.toStdString(), document.dump());
    MainWindow window;
    window.show();
    window.set_headroom_program(HEADROOM_BINARY);
    QSignalSpy timed(&window.machine_calibration(), &MachineCalibration::finished);
    QVERIFY(window.open_trace(path));
    QVERIFY(settle(window));
    const double as_recorded = window.current_result()->plan->predicted.step_seconds;
    QVERIFY(timed.count() == 1 || timed.wait(60000));
    QVERIFY(settle(window));
    const auto& plan = *window.current_result()->plan;
    QVERIFY2(plan.predicted.step_seconds > 10 * as_recorded, qPrintable(QString::number(plan.predicted.step_seconds)));
    QVERIFY2(window.warnings_text().contains("as fast as the one the times were measured on (a much faster machine"),
             qPrintable(window.warnings_text()));
    QVERIFY(window.warnings_text().contains("times rescaled to this machine"));
    QVERIFY(plan.calibration && plan.calibration->device != "a much faster machine");
    save_shot(window, "rescaled-to-this-machine");
  }

  // A calibration that `headroom calibrate` warns was taken beside other processes' work is not the
  // machine's speed: the app keeps the trace's times and says why (as `headroom plan` does). The
  // command here is a stand-in that answers a machine ten times slower, with the warning.
  void aTimingTakenBesideOtherWorkIsNotCompared() {
    QTemporaryDir dir;
    const QString program = dir.filePath("headroom");
    const std::string slow = nlohmann::json{{"device", "this machine"}, {"threads", 2}, {"measured_at", "2026-11-28T00:00:00Z"},
                                            {"runs", {{{"matmul_flops_per_s", 1e9}, {"conv_flops_per_s", 1e9},
                                                       {"memory_bytes_per_s", 1e8}}}}}.dump();
    headroom::core::write_file_atomically(program.toStdString(),
                                          // Answers after the first plan settles, as a real timing does.
                                          "#!/bin/sh\n"
                                          "sleep 2\n"
                                          "eval out=\\${$#}\n"
                                          "printf '%s' '" + slow + "' > \"$out\"\n"
                                          "echo 'warning: other processes kept 1.5 cores busy on average while calibrating: this "
                                          "timing is not kept' >&2\n");
    QVERIFY(QFile::setPermissions(program, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner));
    MainWindow window;
    window.show();
    window.set_headroom_program(program);
    QSignalSpy timed(&window.machine_calibration(), &MachineCalibration::finished);
    QVERIFY(window.open_trace(committed("cpu-gpt.json")));
    QVERIFY(settle(window));
    const double as_recorded = window.current_result()->plan->predicted.step_seconds;
    QVERIFY(timed.count() == 1 || timed.wait(60000));
    QVERIFY(settle(window));
    QVERIFY2(window.warnings_text().contains(
                 "this machine could not be timed (other processes kept 1.5 cores busy on average while calibrating): the "
                 "times are the trace's"),
             qPrintable(window.warnings_text()));
    QCOMPARE(window.current_result()->plan->predicted.step_seconds, as_recorded);
  }

  void savedPlanIsWhatHeadroomPlanWrites() {
    // The committed trace without its calibration: the app and `headroom plan` each time this
    // machine, and on a busy one (ctest's other tests) one may rescale where the other does not;
    // the rescaling has its own test (aTraceFromAnotherMachineIsRescaledToThisOne).
    QTemporaryDir dir;
    nlohmann::json document = nlohmann::json::parse(headroom::core::read_file(committed("cpu-bert.json").toStdString()));
    document.erase("calibration");
    const QString trace_path = dir.filePath("bert.json");
    headroom::core::write_file_atomically(trace_path.toStdString(), document.dump());
    MainWindow window;
    QVERIFY(window.open_trace(trace_path));
    QVERIFY(settle(window));
    QVERIFY(window.save_plan(dir.filePath("gui.json")));
    const PlanInputs& in = window.current_result()->inputs;
    QProcess cli;
    cli.start(HEADROOM_BINARY, {"plan", QString::fromStdString(window.trace()->path), "--budget",
                                QString::number(in.budget_bytes), "--batch", QString::number(in.global_batch), "-o",
                                dir.filePath("cli.json")});
    QVERIFY(cli.waitForFinished(60000));
    QCOMPARE(cli.exitCode(), 0);
    QCOMPARE(QString::fromStdString(headroom::core::read_file(dir.filePath("gui.json").toStdString())),
             QString::fromStdString(headroom::core::read_file(dir.filePath("cli.json").toStdString())));
  }

  // A trace of two precisions: the precision box offers both, the plan text sets each one's plan
  // side by side, and choosing the other plans (and saves) in it. The second precision here is the
  // committed mlp trace relabelled with its times halved: what is checked is the window.
  void aTraceOfSeveralPrecisionsPlansInTheOneChosen() {
    QTemporaryDir dir;
    headroom::core::Trace trace = headroom::core::read_trace_file(committed("cpu-mlp.json").toStdString());
    headroom::core::Trace faster = trace;
    faster.precision = headroom::core::Precision::Bf16Autocast;
    for (auto& layer : faster.layers) {
      for (auto& sample : layer.samples) {
        sample.fwd_ns /= 2;
        sample.bwd_ns /= 2;
      }
    }
    trace.other_precisions.push_back(faster);
    const QString path = dir.filePath("two.json");
    headroom::core::write_trace_file(path.toStdString(), trace);
    MainWindow window;
    window.resize(1400, 880);
    window.show();
    QVERIFY(window.open_trace(path));
    QVERIFY(settle(window));
    QCOMPARE(window.precision_box()->count(), 2);
    QVERIFY(window.precision_box()->isEnabled());
    QVERIFY(window.current_result()->plan);
    QCOMPARE(window.current_result()->plan->precision, headroom::core::Precision::Fp32);
    const QString summary = QString::fromStdString(window.current_result()->summary);
    QVERIFY2(summary.contains("each precision the trace measured, planned alike"), qPrintable(summary));
    QVERIFY2(summary.contains("fp32 *"), qPrintable(summary));
    window.precision_box()->setCurrentText("bf16-autocast");
    QVERIFY(settle(window));
    QVERIFY(window.current_result()->plan);
    QCOMPARE(window.current_result()->plan->precision, headroom::core::Precision::Bf16Autocast);
    QVERIFY(QString::fromStdString(window.current_result()->summary).contains("bf16-autocast *"));
    save_shot(window, "precisions");
    QVERIFY(window.save_plan(dir.filePath("plan.json")));
    const headroom::core::Plan plan = headroom::core::read_plan_file(dir.filePath("plan.json").toStdString());
    QCOMPARE(plan.precision, headroom::core::Precision::Bf16Autocast);
    QCOMPARE(headroom::core::load_plan_trace(plan, dir.filePath("plan.json").toStdString()).precision,
             headroom::core::Precision::Bf16Autocast);
    // A trace of one precision: nothing to choose.
    QVERIFY(window.open_trace(committed("cpu-mlp.json")));
    QVERIFY(settle(window));
    QCOMPARE(window.precision_box()->count(), 1);
    QVERIFY(!window.precision_box()->isEnabled());
  }

  // The replans leave the plan's time by class of work out (four more predictions each); the plan
  // the app writes has it, so `headroom execute` can move its prediction to the machine it runs on.
  void aWrittenPlanCarriesItsTimeByClassOfWork() {
    QTemporaryDir dir;
    MainWindow window;
    QVERIFY(window.open_trace(committed("cpu-mlp.json")));
    QVERIFY(settle(window));
    QVERIFY(window.current_result()->plan);
    QVERIFY(!window.current_result()->plan->predicted_part(headroom::core::kComputeBoundSecondsPart));
    QVERIFY(window.save_plan(dir.filePath("gui.json")));
    const headroom::core::Plan plan = headroom::core::read_plan_file(dir.filePath("gui.json").toStdString());
    double classes = 0;
    for (const auto part : {headroom::core::kMatmulBoundSecondsPart, headroom::core::kComputeBoundSecondsPart,
                            headroom::core::kMemoryBoundSecondsPart}) {
      const auto seconds = plan.predicted_part(part);
      QVERIFY2(seconds.has_value(), part.data());
      classes += *seconds;
    }
    // A CPU step's time is all of one class or another.
    QVERIFY2(std::abs(classes - plan.predicted.step_seconds) < 1e-3 * plan.predicted.step_seconds,
             qPrintable(QString("%1 against %2").arg(classes).arg(plan.predicted.step_seconds)));
  }

  void runningAPlanShowsPredictedAgainstMeasured() {
    MainWindow window;
    window.show();
    QVERIFY(window.open_trace(committed("cpu-mlp.json")));
    QVERIFY(settle(window));
    RunPanel* panel = window.run_panel();
    panel->set_program(HEADROOM_BINARY);
    panel->steps()->setValue(2);

    // Cancel kills the child.
    QSignalSpy finished(panel, &RunPanel::runFinished);
    panel->run_button()->click();
    QVERIFY(panel->running());
    QVERIFY(panel->cancel_button()->isEnabled());
    panel->cancel_button()->click();
    QVERIFY(finished.count() == 1 || finished.wait(10000));
    QVERIFY(panel->last_outcome());
    QCOMPARE(panel->last_outcome()->status, ExecutorOutcome::Status::Cancelled);
    QVERIFY(!panel->running());

    QSignalSpy progressed(panel->progress_bar(), &QProgressBar::valueChanged);
    panel->run_button()->click();
    QVERIFY(finished.wait(180000));
    const auto& outcome = panel->last_outcome();
    QVERIFY(outcome);
    QVERIFY2(outcome->status == ExecutorOutcome::Status::Ok, qPrintable(outcome->message));
    QCOMPARE(outcome->report->predicted.peak_bytes, window.current_result()->plan->predicted.peak_bytes);
    QVERIFY(outcome->report->measured.peak_bytes > 0);
    QCOMPARE(panel->progress_bar()->value(), panel->progress_bar()->maximum());
    QVERIFY(progressed.count() >= 2);
    QVERIFY(!panel->comparison()->item(0, 1)->text().isEmpty());
    // Signed errors, and enough digits to check them: MiB to two decimals, four significant digits.
    for (int row = 0; row < 3; ++row) {
      const QString error = panel->comparison()->item(row, 2)->text();
      QVERIFY2(error.endsWith("%") && (error.startsWith('+') || error.startsWith(QChar(0x2212))), qPrintable(error));
    }
    QVERIFY(QRegularExpression(R"(^\d+\.\d\d MiB$)").match(panel->comparison()->item(0, 1)->text()).hasMatch());
    QVERIFY(!panel->results_stale());
    QVERIFY(!panel->stale_label()->isVisible());
    window.resize(1400, 880);
    window.findChild<QTabWidget*>()->setCurrentWidget(panel);
    save_shot(window, "after-run");

    // Another budget: the results are for the earlier plan, and say so.
    const std::int64_t ran_budget = window.current_result()->inputs.budget_bytes;
    type_budget(window, QString::number(ran_budget * 2));
    QVERIFY(settle(window));
    QVERIFY(panel->results_stale());
    QVERIFY(panel->stale_label()->isVisible() || !panel->isVisible());
    QVERIFY2(panel->stale_label()->text().contains("budget " + QString::fromStdString(core::format_bytes(ran_budget))),
             qPrintable(panel->stale_label()->text()));
    QVERIFY(panel->comparison()->item(0, 1)->foreground().color() != panel->palette().color(QPalette::Text));
    save_shot(window, "after-run-stale");
    // Back to it: current again.
    type_budget(window, QString::number(ran_budget));
    QVERIFY(settle(window));
    QVERIFY(!panel->results_stale());
    // Another trace: the results belong to another model, and go.
    QVERIFY(window.open_trace(committed("cpu-gpt.json")));
    QVERIFY(settle(window));
    QVERIFY(!panel->results_stale());
    QVERIFY(!panel->last_outcome());
    QVERIFY(panel->comparison()->item(0, 1) == nullptr || panel->comparison()->item(0, 1)->text().isEmpty());
  }

  void runWithoutTheCommandSaysWhy() {
    MainWindow window;
    QVERIFY(window.open_trace(committed("cpu-mlp.json")));
    QVERIFY(settle(window));
    window.run_panel()->set_program({});
    window.run_panel()->run_button()->click();
    QVERIFY2(window.error_text().contains("PATH"), qPrintable(window.error_text()));
  }

  void niceTicksNeverRepeatALabel() {
    // Below 2 samples/s whole-number labels read "0, 1, 1, 2".
    const NiceTicks slow = nice_ticks(1.43, 5);
    QCOMPARE(tick_labels(slow), (std::vector<std::string>{"0.0", "0.5", "1.0", "1.5"}));
    for (const double top : {0.013, 0.3, 1.0, 1.9, 7.5, 42.0, 980.0, 12345.0}) {
      const NiceTicks ticks = nice_ticks(top, 5);
      QVERIFY(ticks.max >= top);
      const auto labels = tick_labels(ticks);
      QVERIFY2(labels.size() >= 3 && labels.size() <= 11, qPrintable(QString::number(top)));
      QCOMPARE(std::set<std::string>(labels.begin(), labels.end()).size(), labels.size());
    }
    // The memory axis follows the peak once the budget is far above it, and says so.
    QCOMPARE(memory_scale(1 << 30, std::int64_t{80} << 30).top_bytes, std::int64_t{1} << 30);
    QVERIFY(memory_scale(1 << 30, std::int64_t{80} << 30).budget_off_scale);
    QCOMPARE(memory_scale(1 << 30, 3 << 29).top_bytes, std::int64_t{3} << 29);
    QVERIFY(!memory_scale(1 << 30, 3 << 29).budget_off_scale);
  }

  void throughputAxisOfASlowModelReadsDistinctTicks() {
    MainWindow window;
    QVERIFY(shown_with(window, "cpu-bert-large.json"));
    double fastest = 0;
    for (const auto& p : window.current_result()->throughput.points) fastest = std::max(fastest, p.samples_per_second);
    const QStringList labels = window.throughput_chart()->y_tick_labels();
    QVERIFY2(QSet<QString>(labels.begin(), labels.end()).size() == labels.size(), qPrintable(labels.join(", ")));
    QVERIFY(labels.size() >= 3);
    QVERIFY(labels.back().toDouble() >= fastest);
    if (fastest < 2) QVERIFY2(labels.join(",").contains('.'), qPrintable(labels.join(", ")));
    save_shot(window, "bert-large");
  }

  void peakLabelStaysInsideThePlotAndGoesWhenNothingFits() {
    MainWindow window;
    QVERIFY(shown_with(window, "cpu-bert.json"));
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    const MemoryChart* chart = window.memory_chart();
    // Drawn by the chart as a point label it was clipped, garbled and left behind.
    QVERIFY(!chart->peak_series()->pointLabelsVisible());
    const auto check = [&] {
      const auto* label = chart->peak_label();
      const QString expected = "peak " + QString::fromStdString(core::format_bytes(window.current_result()->timeline.peak_bytes));
      QCOMPARE(label->text(), expected);
      QVERIFY(label->isVisible());
      QVERIFY2(chart->chart()->plotArea().contains(label_box(label)),
               qPrintable(QString("label %1,%2 %3x%4 outside the plot")
                              .arg(label_box(label).x())
                              .arg(label_box(label).y())
                              .arg(label_box(label).width())
                              .arg(label_box(label).height())));
    };
    check();
    // One click of the slider, and a budget large enough for the peak to sit at the chart's top.
    QSlider* slider = window.budget_control()->slider();
    save_screen_shot(window, "screen-before-slider-click");
    slider->setValue(slider->value() + 1);
    QVERIFY(settle(window));
    check();
    save_screen_shot(window, "screen-after-slider-click");
    type_budget(window, QString::fromStdString(core::format_bytes(window.current_result()->plan->predicted.peak_bytes * 21 / 20 + (1 << 20))));
    QVERIFY(settle(window));
    QVERIFY(window.current_result()->plan);
    check();
    // At a small window too.
    window.resize(1024, 700);
    QTest::qWait(50);
    check();
    type_budget(window, "1MiB");
    QVERIFY(settle(window));
    QVERIFY(!window.current_result()->plan);
    QVERIFY(!chart->peak_label()->isVisible());
    QCOMPARE(chart->peak_series()->count(), 0);
  }

  void memoryAxisFollowsThePeakAtALargeBudgetAndMarksTheBudget() {
    MainWindow window;
    QVERIFY(shown_with(window, "cpu-bert.json"));
    const MemoryChart* chart = window.memory_chart();
    // Normal: the budget and the allowed line (budget less the margin) are drawn, within the axis.
    const PlanResult* normal = window.current_result();
    const double unit = chart->bytes_per_unit();
    QCOMPARE(chart->budget_series()->count(), 2);
    QVERIFY(chart->budget_series()->at(0).y() <= chart->y_axis()->max());
    QCOMPARE(chart->allowed_series()->at(0).y() * unit, double(normal->inputs.budget_bytes - normal->plan->margin_bytes));
    QVERIFY(!chart->off_scale_label()->isVisible());

    // A device preset far above the plan: the data fills the chart, the budget is named above it.
    QComboBox* presets = window.budget_control()->presets();
    const int at = presets->findText("80 GiB");
    QVERIFY(at > 0);
    emit presets->activated(at);
    QVERIFY(settle(window));
    const PlanResult* large = window.current_result();
    QCOMPARE(large->inputs.budget_bytes, std::int64_t{80} << 30);
    QCOMPARE(window.budget_control()->budget(), std::int64_t{80} << 30);
    QVERIFY(large->plan);
    const double peak = double(large->timeline.peak_bytes) / chart->bytes_per_unit();
    QVERIFY2(chart->y_axis()->max() < 1.5 * peak, qPrintable(QString("%1 vs %2").arg(chart->y_axis()->max()).arg(peak)));
    QVERIFY(chart->off_scale_label()->isVisible());
    QVERIFY(chart->off_scale_label()->text().contains("budget 80.0 GiB"));
    QVERIFY(chart->chart()->plotArea().contains(label_box(chart->off_scale_label())));
    QCOMPARE(chart->budget_series()->count(), 0);
    save_shot(window, "large-budget");
  }

  void budgetFieldRefusesZeroInItsOwnWordsAndRecovers() {
    MainWindow window;
    window.show();
    QVERIFY(window.open_trace(committed("cpu-mlp.json")));
    QVERIFY(settle(window));
    BudgetControl* budget = window.budget_control();
    const std::int64_t before = budget->budget();
    const quint64 generation = window.coordinator().latest_generation();
    for (const QString& bad : {QString("0"), QString("0MiB"), QString("-5MiB")}) {
      type_budget(window, bad);
      QVERIFY2(budget->field_rejected(), qPrintable(bad));
      QCOMPARE(budget->field_error()->text(), QString("Budget must be more than 0 bytes"));
      QVERIFY(!budget->field()->styleSheet().isEmpty());
    }
    type_budget(window, "lots");
    QVERIFY(budget->field_rejected());
    QVERIFY2(!budget->field_error()->text().contains("--"), qPrintable(budget->field_error()->text()));
    // Nothing was planned for a refused budget.
    QCOMPARE(window.coordinator().latest_generation(), generation);
    QCOMPARE(budget->budget(), before);
    // A valid entry, even the budget already set, takes the mark away.
    type_budget(window, QString::number(before));
    QVERIFY(!budget->field_rejected());
    QVERIFY(budget->field()->styleSheet().isEmpty());
    QVERIFY(!budget->field()->toolTip().contains("Budget must"));
    type_budget(window, "0");
    QVERIFY(budget->field_rejected());
    type_budget(window, "64MiB");
    QVERIFY(!budget->field_rejected());
    QVERIFY(budget->field()->styleSheet().isEmpty());
    QVERIFY(settle(window));
    QCOMPARE(window.current_result()->inputs.budget_bytes, std::int64_t{64} << 20);
  }

  void devicePresetsSetTheBudget() {
    MainWindow window;
    QVERIFY(window.open_trace(committed("cpu-mlp.json")));
    QVERIFY(settle(window));
    QComboBox* presets = window.budget_control()->presets();
    QStringList offered;
    for (int i = 1; i < presets->count(); ++i) offered << presets->itemText(i);
    QCOMPARE(offered, (QStringList{"16 GiB", "24 GiB", "40 GiB", "48 GiB", "80 GiB", "141 GiB"}));
    emit presets->activated(presets->findText("24 GiB"));
    QCOMPARE(window.budget_control()->budget(), std::int64_t{24} << 30);
    QCOMPARE(window.budget_control()->field()->text(), QString("24.0 GiB"));
    QVERIFY(settle(window));
    QCOMPARE(window.current_result()->inputs.budget_bytes, std::int64_t{24} << 30);
    QCOMPARE(presets->currentIndex(), 0);  // ready to choose again
  }

  void strategyCheckboxesComeFromTheStrategyTable() {
    MainWindow window;
    QVERIFY(window.open_trace(committed("cpu-bert.json")));
    QVERIFY(settle(window));
    // One box per implemented strategy, labelled and explained as the table says, every one checked
    // as "all" applies them (L2L only where no plan without it fits).
    for (const auto& entry : headroom::planner::strategy_table()) {
      auto* box = window.findChild<QCheckBox*>(QString("strategy_") + QString::fromStdString(std::string(entry.name)));
      if (!entry.implemented) {
        QVERIFY(box == nullptr);
        continue;
      }
      QVERIFY(box != nullptr);
      QCOMPARE(box->text(), QString::fromStdString(std::string(entry.label)));
      QVERIFY(box->toolTip().startsWith(QString::fromStdString(std::string(entry.summary))));
      QVERIFY(box->isChecked());
      QVERIFY(window.current_result()->inputs.strategies.contains(entry.id));
    }
    // With several devices, as "all" does, L2L (which does not run with them) is greyed out and
    // left out, its tick kept for one device again.
    auto* l2l = window.findChild<QCheckBox*>("strategy_l2l");
    window.findChild<QLineEdit*>("linkEdit")->setText("25GB/s,5us");
    window.devices_box()->setValue(2);
    QVERIFY(settle(window));
    QVERIFY(!l2l->isEnabled() && l2l->isChecked());
    QVERIFY(!window.current_result()->inputs.strategies.contains(headroom::planner::Strategy::L2L));
    QVERIFY(window.current_result()->inputs.strategies.contains(headroom::planner::Strategy::MicroBatching));
    QVERIFY2(window.current_result()->error.empty(), window.current_result()->error.c_str());
    QVERIFY(window.current_result()->plan);
    window.devices_box()->setValue(1);
    QVERIFY(settle(window));
    QVERIFY(l2l->isEnabled());
    QVERIFY(window.current_result()->inputs.strategies.contains(headroom::planner::Strategy::L2L));
    // Unchecking one plans without it.
    auto* tempo = window.findChild<QCheckBox*>("strategy_tempo");
    tempo->setChecked(false);
    QVERIFY(settle(window));
    QVERIFY(!window.current_result()->inputs.strategies.contains(headroom::planner::Strategy::Tempo));
  }

  // Inf-CL: clip at a batch of 65,536 under 64 MiB, where the standard loss alone needs tens of
  // GiB. The plan tiles the loss and micro-batches the towers under a gradient cache; the memory
  // chart shows the cache, the towers' no-grad pass and the loss over the whole batch as tasks.
  void clipPlanShowsTheGradientCacheAndTheLossPhase() {
    MainWindow window;
    QVERIFY(shown_with(window, "cpu-clip.json"));
    QVERIFY(window.findChild<QCheckBox*>("strategy_infcl") != nullptr);
    window.batch_box()->setValue(65536);
    QVERIFY(settle(window));
    type_budget(window, "64MiB");
    QVERIFY(settle(window));
    const PlanResult* result = window.current_result();
    QVERIFY(result && result->plan);
    QVERIFY(result->plan->choice.loss_tiles.has_value());
    QVERIFY(result->plan->choice.micro_batches.size() > 1);
    QCOMPARE(result->timeline.peak_bytes, result->plan->predicted.peak_bytes);
    const auto& timeline = result->timeline;
    const int loss = window.trace()->trace.contrastive_loss->layer;
    const auto category = [&](const std::string& name) {
      const auto it = std::find(timeline.categories.begin(), timeline.categories.end(), name);
      return it == timeline.categories.end() ? timeline.categories.size() : static_cast<std::size_t>(it - timeline.categories.begin());
    };
    int loss_tasks = 0, cache_tasks = 0, no_grad = 0;
    for (const auto& task : timeline.tasks) {
      loss_tasks += task.layer == loss && task.category == category("forward");
      cache_tasks += task.category == category("gradient cache");
      no_grad += task.category == category("forward (checkpointed, no grad)");
    }
    QVERIFY(loss_tasks >= 1);  // the loss over the whole batch (and the surrogate in the repeated micro-batch)
    QVERIFY(cache_tasks >= 2);  // allocated, and gone before the optimizer
    QVERIFY(no_grad > 0);
    QVERIFY(window.summary_text().contains("gradient cache over"));
    save_shot(window, "clip-infcl");
  }

  // L2L (issues 15 and 36): ticked as "all" ticks it, under a budget no ordinary plan fits, the plan
  // is L2L and the chart draws its step (parameters of two stages on the device, the copies'
  // lanes). Unticked, nothing fits, the floor is drawn and the message says what ticking it needs.
  void l2lPlanIsChosenWhereNothingElseFits() {
    MainWindow window;
    QVERIFY(shown_with(window, "cpu-mlp.json"));
    window.batch_box()->setValue(8);
    QVERIFY(settle(window));
    auto* l2l = window.findChild<QCheckBox*>("strategy_l2l");
    QVERIFY(l2l != nullptr && l2l->isChecked());
    l2l->setChecked(false);
    QVERIFY(settle(window));
    type_budget(window, "4.3MiB");
    QVERIFY(settle(window));
    const PlanResult* none = window.current_result();
    QVERIFY(none && !none->plan);
    QVERIFY(none->floor_bytes > 0);
    QCOMPARE(window.memory_chart()->floor_series()->count(), 2);
    const QString reason = QString::fromStdString(none->infeasible_reason);
    QVERIFY2(reason.contains("; with L2L (layer-to-layer offload) ticked as well it must be at least "), qPrintable(reason));
    QVERIFY(window.findChild<QLabel*>("memoryLegend")->toolTip().contains("floor:"));
    save_shot(window, "l2l-unticked");
    l2l->setChecked(true);
    QVERIFY(settle(window));
    const PlanResult* result = window.current_result();
    QVERIFY(result && result->plan);
    QVERIFY(result->plan->choice.l2l.has_value());
    QCOMPARE(result->timeline.peak_bytes, result->plan->predicted.peak_bytes);
    QVERIFY(window.summary_text().contains("L2L: "));
    save_shot(window, "l2l");
  }

  // A fine-tuning trace: the trace's line says how much trains, the layer table which layers are
  // frozen, and the whole batch needs less than with every parameter trained.
  void frozenParametersAreShownAndHoldNoState() {
    QTemporaryDir dir;
    core::Trace trace = core::read_trace_file(committed("cpu-cnn.json").toStdString());
    const core::Trace trained = trace;
    for (auto& layer : trace.layers) {
      if (layer.name != "fc") layer.frozen_param_bytes = layer.param_bytes;
    }
    trace.model.freeze = {"*", "!fc"};
    const std::string path = dir.filePath("frozen.json").toStdString();
    core::write_trace_file(path, trace);
    MainWindow window;
    QVERIFY(shown_with_file(window, QString::fromStdString(path)));
    QVERIFY(window.findChild<QLabel*>("traceLabel")->text().contains(" trainable)"));
    LayerTableModel* model = window.layer_model();
    QCOMPARE(model->data(model->index(0, LayerTableModel::Params)).toString(),
             QString::fromStdString(core::format_bytes(trace.layers[0].param_bytes)) + " frozen");
    // The trace's optimizer state is as measured, so what differs is the frozen layers' gradients.
    const std::string trained_path = dir.filePath("trained.json").toStdString();
    core::write_trace_file(trained_path, trained);
    QCOMPARE(compute_plan(*load_trace_document(path), inputs(1ll << 40, 64)).plan->predicted.peak_bytes +
                 trace.frozen_param_bytes(),
             compute_plan(*load_trace_document(trained_path), inputs(1ll << 40, 64)).plan->predicted.peak_bytes);
  }

  // An eager capture's trace plans like any other; its plans run in the user's loop, so Run is off
  // and says where they run.
  void anEagerCapturesPlansRunInTheUsersLoop() {
    QTemporaryDir dir;
    core::Trace trace = core::read_trace_file(committed("cpu-mlp.json").toStdString());
    trace.model.capture = "eager";
    trace.model.config = {{"input", "64:float32"}, {"loss", "cross-entropy"}, {"depth", "1"}};
    const std::string path = dir.filePath("eager.json").toStdString();
    core::write_trace_file(path, trace);
    MainWindow window;
    QVERIFY(shown_with_file(window, QString::fromStdString(path)));
    QVERIFY(window.findChild<QLabel*>("traceLabel")->text().contains("captured in eager PyTorch"));
    QVERIFY(window.current_result() && window.current_result()->plan);
    QVERIFY(!window.run_panel()->run_button()->isEnabled());
    QVERIFY(window.run_panel()->status_label()->text().contains("headroom.apply"));
    window.findChild<QTabWidget*>()->setCurrentWidget(window.run_panel());
    save_shot(window, "eager-capture");
    QVERIFY(shown_with(window, "cpu-mlp.json"));
    QVERIFY(window.run_panel()->run_button()->isEnabled());
  }

  // Over a slow link, L2L keeps its first stages on the device where they fit (L2L from a
  // chosen block on): the summary names the block, and the chart's peak is the plan's, their
  // parameters and optimizer state drawn under everything else.
  void l2lKeepsTheFirstStagesOnTheDeviceOverASlowLink() {
    QTemporaryDir dir;
    core::Trace trace = core::read_trace_file(committed("cpu-mlp.json").toStdString());
    trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = 1e7;
    const std::string path = dir.filePath("slow-link.json").toStdString();
    core::write_trace_file(path, trace);
    MainWindow window;
    QVERIFY(shown_with_file(window, QString::fromStdString(path)));
    window.batch_box()->setValue(8);
    QVERIFY(settle(window));
    type_budget(window, "8MiB");
    QVERIFY(settle(window));
    window.findChild<QCheckBox*>("strategy_l2l")->setChecked(true);
    QVERIFY(settle(window));
    const PlanResult* result = window.current_result();
    QVERIFY(result && result->plan && result->plan->choice.l2l);
    QVERIFY(!result->plan->choice.l2l->whole_model());
    QCOMPARE(result->timeline.peak_bytes, result->plan->predicted.peak_bytes);
    QVERIFY2(window.summary_text().contains(
                 QString("L2L from block %1 on").arg(result->plan->choice.l2l->from_block)),
             qPrintable(window.summary_text()));
    save_shot(window, "l2l-from-block");
  }

  void switchingTheOptimizerRecomputesTheWholeBatchHint() {
    MainWindow window;
    QVERIFY(window.open_trace(committed("cpu-bert.json")));
    QVERIFY(settle(window));
    const auto& trace = window.trace()->trace;
    const int batch = window.batch_box()->value();
    const auto need = [&](const char* optimizer) {
      return QString::fromStdString(core::format_bytes(budget_range(trace, batch, optimizer).whole_batch_bytes));
    };
    QVERIFY(need("sgd") != need("adam"));
    const QString other = window.optimizer_box()->currentText() == "adam" ? "sgd" : "adam";
    const QString first = window.optimizer_box()->currentText();
    QVERIFY2(window.budget_note()->text().contains("needs " + need(first.toUtf8())), qPrintable(window.budget_note()->text()));
    window.optimizer_box()->setCurrentText(other);
    QVERIFY2(window.budget_note()->text().contains("needs " + need(other.toUtf8())), qPrintable(window.budget_note()->text()));
    QVERIFY(window.budget_note()->text().contains(other));
    QVERIFY(settle(window));
  }

  void infeasibleBudgetShowsTheFloorAndTheLeastPlanAndOffersIt() {
    MainWindow window;
    QVERIFY(shown_with(window, "cpu-bert.json"));
    QVERIFY(!window.least_budget_button()->isVisible());
    // Without L2L, which goes below the floor (infeasibleWithL2LDrawsNoFloor).
    window.findChild<QCheckBox*>("strategy_l2l")->setChecked(false);
    QVERIFY(settle(window));
    type_budget(window, "100MiB");
    QVERIFY(settle(window));
    const PlanResult* none = window.current_result();
    QVERIFY(!none->plan);
    QVERIFY(none->best_attempt);
    QVERIFY(none->smallest_budget > std::int64_t{100} << 20);
    QVERIFY(none->floor_bytes > 0);
    const MemoryChart* chart = window.memory_chart();
    const double unit = chart->bytes_per_unit();
    // The least plan's step, the user's budget below its peak, and the floor.
    QVERIFY(chart->top_series()->count() > 10);
    QCOMPARE(none->timeline.peak_bytes, none->best_attempt->predicted.peak_bytes);
    QCOMPARE(chart->budget_series()->at(0).y() * unit, double(std::int64_t{100} << 20));
    QCOMPARE(chart->floor_series()->count(), 2);
    QCOMPARE(chart->floor_series()->at(0).y() * unit, double(none->floor_bytes));
    QVERIFY(chart->y_axis()->max() * unit >= double(none->timeline.peak_bytes));
    // Shown rounded up: the budget a user types as shown fits.
    const QString shown = QString::fromStdString(core::format_bytes_at_least(none->smallest_budget));
    QVERIFY(core::parse_bytes(shown.toStdString()) >= none->smallest_budget);
    QVERIFY(chart->chart()->title().contains(shown));
    QPushButton* least = window.least_budget_button();
    QVERIFY(least->isVisible());
    QCOMPARE(least->text(), "Set budget to " + shown);
    save_shot(window, "infeasible");
    const std::int64_t smallest = none->smallest_budget;
    least->click();
    QVERIFY(settle(window));
    QCOMPARE(window.budget_control()->budget(), smallest);
    QVERIFY(window.current_result()->plan);
    QVERIFY(!least->isVisible());
    QCOMPARE(chart->floor_series()->count(), 0);
  }

  // With L2L ticked the training state is no floor: L2L keeps it on the host. Below even
  // L2L's least, the chart draws L2L's step at the least budget, and no floor line, legend
  // entry or explanation of one; the least budget offered counts L2L.
  void infeasibleWithL2LDrawsNoFloor() {
    MainWindow window;
    QVERIFY(shown_with(window, "cpu-bert.json"));
    QVERIFY(window.findChild<QCheckBox*>("strategy_l2l")->isChecked());
    type_budget(window, "2MiB");
    QVERIFY(settle(window));
    const PlanResult* none = window.current_result();
    QVERIFY(none && !none->plan);
    QCOMPARE(none->floor_bytes, std::int64_t{0});
    QVERIFY(none->best_attempt && none->best_attempt->choice.l2l);
    const core::Trace& trace = window.trace()->trace;
    QVERIFY(none->smallest_budget < core::CostModel(trace).static_bytes());
    const MemoryChart* chart = window.memory_chart();
    QCOMPARE(chart->floor_series()->count(), 0);
    const QLabel* legend = window.findChild<QLabel*>("memoryLegend");
    QVERIFY(!legend->text().contains("floor"));
    QVERIFY(!legend->toolTip().contains("floor"));
    const QString reason = QString::fromStdString(none->infeasible_reason);
    QVERIFY2(reason.contains("l2l") && !reason.contains("below the parameters"), qPrintable(reason));
    QVERIFY(window.least_budget_button()->text().contains(QString::fromStdString(core::format_bytes_at_least(none->smallest_budget))));
    // The slider reaches L2L's least.
    QVERIFY(budget_range(trace, window.batch_box()->value()).least_bytes <= none->smallest_budget);
    save_shot(window, "infeasible-l2l");
    window.least_budget_button()->click();
    QVERIFY(settle(window));
    QVERIFY(window.current_result()->plan && window.current_result()->plan->choice.l2l);
    save_shot(window, "least-l2l");
  }

  void layerTableKeepsNamesInViewAndOneTimeUnitPerColumn() {
    MainWindow window;
    window.resize(1024, 700);
    window.show();
    QVERIFY(window.open_trace(committed("cpu-bert.json")));
    QVERIFY(settle(window));
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    FrozenColumnTableView* view = window.layer_view();
    QTableView* frozen = view->frozen_view();
    QVERIFY(frozen->isVisible());
    QVERIFY(!frozen->isColumnHidden(LayerTableModel::Name));
    for (int c = 1; c < LayerTableModel::ColumnCount; ++c) QVERIFY(frozen->isColumnHidden(c));
    QCOMPARE(frozen->columnWidth(0), view->columnWidth(0));
    // Narrow the table so it must scroll sideways: the names stay where they were.
    view->resize(300, 300);
    QTest::qWait(20);
    const QRect before = frozen->geometry();
    view->horizontalScrollBar()->setValue(view->horizontalScrollBar()->maximum());
    QVERIFY(view->horizontalScrollBar()->maximum() > 0);
    QTest::qWait(20);
    QCOMPARE(frozen->geometry(), before);
    QCOMPARE(frozen->model()->data(frozen->model()->index(0, 0)).toString(),
             QString::fromStdString(window.trace()->trace.layers.front().name));
    QVERIFY(frozen->visualRect(frozen->model()->index(0, 0)).isValid());
    save_shot(*view, "frozen-column");

    // Times: plain numbers in the unit the header names, all with the same decimals.
    const LayerTableModel* model = window.layer_model();
    for (const int column : {int(LayerTableModel::ForwardTime), int(LayerTableModel::BackwardTime)}) {
      const QString header = model->headerData(column, Qt::Horizontal).toString();
      QVERIFY2(header.contains(" ms") || header.contains(" us") || header.contains(" s"), qPrintable(header));
      QSet<int> decimals;
      for (int row = 0; row < model->rowCount(); ++row) {
        const QString text = model->data(model->index(row, column)).toString();
        bool number = false;
        text.toDouble(&number);
        QVERIFY2(number, qPrintable(text));
        decimals.insert(text.contains('.') ? int(text.size() - text.indexOf('.') - 1) : 0);
      }
      QCOMPARE(decimals.size(), 1);
    }
    for (int c = 0; c < LayerTableModel::ColumnCount; ++c) {
      QVERIFY(!model->headerData(c, Qt::Horizontal, Qt::ToolTipRole).toString().isEmpty());
    }
    QVERIFY(model->headerData(LayerTableModel::KeptPerSample, Qt::Horizontal, Qt::ToolTipRole).toString().contains("per sample"));
  }

  void smallWindowCutsNoTitleOrLabel() {
    MainWindow window;
    window.resize(1024, 700);
    window.show();
    QVERIFY(window.open_trace(committed("cpu-bert.json")));
    QVERIFY(settle(window));
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QTest::qWait(50);
    for (QChartView* view : std::initializer_list<QChartView*>{window.memory_chart(), window.throughput_chart()}) {
      const QFontMetricsF metrics(view->chart()->titleFont());
      QVERIFY2(metrics.horizontalAdvance(view->chart()->title()) <= view->chart()->size().width() - 8,
               qPrintable(view->chart()->title()));
    }
    for (QCheckBox* box : window.findChildren<QCheckBox*>()) {
      QVERIFY2(box->width() >= box->sizeHint().width(), qPrintable(box->text()));
    }
    save_shot(window, "small-1024x700");
  }

  void chartsSayWhatIsUnderTheCursor() {
    MainWindow window;
    QVERIFY(shown_with(window, "cpu-bert.json"));
    const PlanResult* r = window.current_result();
    // Throughput: the candidate under the cursor.
    for (const auto& p : r->throughput.points) {
      const QString text = window.throughput_chart()->hover_text_for(p.micro_batch);
      QVERIFY(text.contains(QString("micro-batch %1").arg(p.micro_batch)));
      QVERIFY(text.contains("peak " + QString::fromStdString(core::format_bytes(p.peak_bytes))));
      QVERIFY(text.contains("s/step"));
      QVERIFY(text.contains(QString("%1 checkpointed block").arg(p.checkpointed_blocks)));
      QVERIFY(text.contains(QString("%1 Tempo layer").arg(p.tempo_layers)));
    }
    QVERIFY(window.throughput_chart()->hover_text_for(-1).isEmpty());
    // Memory: at the peak, the time, what runs then and the bytes by kind.
    const QString at_peak = window.memory_chart()->hover_text_at(r->timeline.peak_time_ms);
    QVERIFY2(at_peak.contains("total: " + QString::fromStdString(core::format_bytes(r->timeline.peak_bytes)) + " (the peak)"),
             qPrintable(at_peak));
    QVERIFY2(at_peak.contains("ms into the step"), qPrintable(at_peak));
    QVERIFY2(at_peak.contains("parameters: ") && at_peak.contains("optimizer state: "), qPrintable(at_peak));
    QVERIFY2(at_peak.split('\n').size() >= 3, qPrintable(at_peak));  // the task running at the peak
    // Mid-step, a layer's forward or backward.
    const QString mid = window.memory_chart()->hover_text_at(r->timeline.step_ms / 3);
    QVERIFY2(mid.contains("forward of ") || mid.contains("backward of ") || mid.contains("recompute of "), qPrintable(mid));
    QVERIFY2(mid.contains("activations: "), qPrintable(mid));
    QVERIFY(window.memory_chart()->hover_text_at(r->timeline.step_ms * 2).isEmpty());
    // The mouse over the plot takes the same path.
    QChartView* view = window.memory_chart();
    const QPointF centre = view->chart()->plotArea().center();
    QTest::mouseMove(view->viewport(), view->mapFromScene(view->chart()->mapToScene(centre)));
  }

  void screenshotOfTheMainWindow() {
    MainWindow window;
    QVERIFY(shown_with(window, "cpu-bert.json"));
    // A budget where the larger micro-batches do not fit and the plan checkpoints, so every view
    // has something to show: above the least a plan without L2L needs (below it "all" uses L2L).
    PlanInputs on_the_device = inputs(1, window.batch_box()->value());
    on_the_device.strategies.erase(headroom::planner::Strategy::L2L);
    const std::int64_t least = compute_plan(*window.trace(), on_the_device).smallest_budget;
    type_budget(window, QString::fromStdString(core::format_bytes(least + (10 << 20))));
    QVERIFY(settle(window));
    QVERIFY(window.current_result()->plan);
    QVERIFY(!window.current_result()->plan->choice.l2l);
    QVERIFY(window.throughput_chart()->infeasible_series()->count() > 0);
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QTest::qWait(100);
    const QString path = QString::fromUtf8(HEADROOM_GUI_SCREENSHOT);
    QVERIFY(window.grab().save(path));
    save_shot(window, "normal");
    QVERIFY(QFileInfo(path).size() > 10000);
  }
};

// QTEST_MAIN, with the application headroom-gui runs (its last-resort guard included).
int main(int argc, char** argv) {
  headroom::gui::GuardedApplication app(argc, argv);
  app.setAttribute(Qt::AA_Use96Dpi, true);
  GuiTest test;
  QTEST_SET_MAIN_SOURCE_PATH
  return QTest::qExec(&test, argc, argv);
}
#include "gui_test.moc"
