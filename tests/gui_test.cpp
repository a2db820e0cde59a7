// The desktop app, headless (QT_QPA_PLATFORM=offscreen): its models, the re-planning worker, the
// main window driven as a user would, running a plan in a real `headroom execute` child, and a
// screenshot of the window.
#include <QAbstractItemModelTester>
#include <QApplication>
#include <QDir>
#include <QJsonDocument>
#include <QMessageBox>
#include <QMimeData>
#include <QProcess>
#include <QScopeGuard>
#include <QSemaphore>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest/QtTest>

#include <mutex>

#include "core/atomic_file.h"
#include "core/units.h"
#include "gui/app/main_window.h"
#include "gui/logic/executor_run.h"
#include "gui/logic/layer_table_model.h"
#include "gui/logic/plan_computation.h"
#include "gui/logic/plan_coordinator.h"
#include "gui/logic/recent_files.h"

using namespace headroom;
using namespace headroom::gui;

namespace {

QString committed(const char* name) { return QStringLiteral(HEADROOM_TRACES_DIR "/") + name; }

PlanInputs inputs(std::int64_t budget, std::int64_t batch) {
  PlanInputs in;
  in.budget_bytes = budget;
  in.global_batch = batch;
  return in;
}

// Closes the next message box that appears and keeps its text, so a test sees the dialog a user
// would without blocking on it.
class DialogCatcher : public QObject {
 public:
  DialogCatcher() {
    timer_.setInterval(20);
    QObject::connect(&timer_, &QTimer::timeout, this, [this] {
      if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget())) {
        texts_ << box->text();
        box->close();
      }
    });
    timer_.start();
  }
  const QStringList& texts() const { return texts_; }

 private:
  QTimer timer_;
  QStringList texts_;
};

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

// Waits until the window shows the plan of the latest request (several may have been coalesced).
bool settle(MainWindow& window) {
  QElapsedTimer clock;
  clock.start();
  while (window.coordinator().busy() && clock.elapsed() < 30000) QTest::qWait(10);
  QTest::qWait(20);
  return !window.coordinator().busy();
}

}  // namespace

class GuiTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QApplication::setOrganizationName("headroom-tests");
    QApplication::setApplicationName("headroom-gui-tests");
    QSettings().clear();
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
    QVERIFY(!result.plan->checkpointed_blocks.empty());
    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    model.set_plan(result.plan);
    QCOMPARE(changed.count(), 1);
    QCOMPARE(model.timing_batch(), result.plan->micro_batches.front());
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
    QCOMPARE(chosen.micro_batch, result.plan->micro_batches.front());
    QCOMPARE(chosen.samples_per_second, result.plan->predicted.samples_per_second);
    QVERIFY(QString::fromStdString(result.summary).contains("predicted peak"));

    const PlanResult none = compute_plan(*trace, inputs(1 << 20, 32));
    QVERIFY(!none.plan);
    QVERIFY(none.smallest_budget > 1 << 20);
    QVERIFY(QString::fromStdString(none.infeasible_reason).contains("the budget must be at least"));
    QCOMPARE(none.throughput.chosen, -1);
    const PlanResult bad = compute_plan(*trace, inputs(300ll << 20, 0));
    QVERIFY(QString::fromStdString(bad.error).contains("--batch"));
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
    window.resize(1400, 880);
    window.show();
    QVERIFY(window.open_trace(committed("cpu-bert.json")));
    QVERIFY(settle(window));
    const PlanResult* first = window.current_result();
    QVERIFY(first);
    QVERIFY(first->plan);
    const std::int64_t first_budget = first->inputs.budget_bytes;
    const std::int64_t first_peak = first->plan->predicted.peak_bytes;
    const auto first_micro = first->plan->micro_batches.front();
    const auto lean_layers = [](const headroom::core::Plan& plan) {
      return std::count_if(plan.layers.begin(), plan.layers.end(), [](const auto& l) { return l.tempo; });
    };
    const auto first_lean = lean_layers(*first->plan);
    const QString first_summary = window.summary_text();
    const auto first_fits = window.throughput_chart()->feasible_series()->count();
    QCOMPARE(window.memory_chart()->budget_series()->at(0).y() * window.memory_chart()->bytes_per_unit(),
             double(first_budget));

    // Drag the budget down a good way, as a user would: the plan, the charts and the table follow.
    QSlider* slider = window.budget_control()->slider();
    const auto trace = window.trace();
    const BudgetRange range = budget_range(trace->trace, window.batch_box()->value());
    const std::int64_t least = compute_plan(*trace, inputs(1, window.batch_box()->value())).smallest_budget;
    QVERIFY(least < first_budget);
    const std::int64_t target = least + (first_budget - least) / 4;
    slider->setValue(budget_to_slider(target, range));
    QVERIFY(settle(window));
    const PlanResult* second = window.current_result();
    QVERIFY(second != first);
    const std::int64_t budget = window.budget_control()->budget();
    QCOMPARE(second->inputs.budget_bytes, budget);
    QVERIFY(budget < first_budget);
    QVERIFY(second->plan);
    QVERIFY(second->plan->predicted.peak_bytes <= budget);
    QVERIFY(second->plan->predicted.peak_bytes <= first_peak);
    // Less room never means a larger micro-batch or fewer memory-saving choices.
    QVERIFY(second->plan->micro_batches.front() <= first_micro);
    QVERIFY(second->plan->micro_batches.front() < first_micro || !second->plan->checkpointed_blocks.empty() ||
            lean_layers(*second->plan) >= first_lean);
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
    QCOMPARE(window.layer_model()->timing_batch(), second->plan->micro_batches.front());

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
  }

  void badFilesShowTheReasonAndKeepTheTrace() {
    MainWindow window;
    window.show();
    QVERIFY(window.open_trace(committed("cpu-mlp.json")));
    QVERIFY(settle(window));
    QTemporaryDir dir;
    const QString malformed = dir.filePath("malformed.json");
    headroom::core::write_file_atomically(malformed.toStdString(), "{\"schema\": \"headroom.trace/1\", ");
    const QString wrong = dir.filePath("plan-not-trace.json");
    headroom::core::write_file_atomically(wrong.toStdString(), "{\"schema\": \"headroom.plan/1\"}");
    {
      DialogCatcher catcher;
      QVERIFY(!window.open_trace(malformed));
      QVERIFY(!window.open_trace(wrong));
      QVERIFY(!window.open_trace(dir.filePath("missing.json")));
      QCOMPARE(catcher.texts().size(), 3);
      QVERIFY2(catcher.texts()[0].contains("malformed.json") && catcher.texts()[0].contains("malformed JSON"),
               qPrintable(catcher.texts()[0]));
      QVERIFY2(catcher.texts()[1].contains("plan-not-trace.json") && catcher.texts()[1].contains("schema"),
               qPrintable(catcher.texts()[1]));
      QVERIFY2(catcher.texts()[2].contains("missing.json"), qPrintable(catcher.texts()[2]));
    }
    QVERIFY(QString::fromStdString(window.trace()->path).endsWith("cpu-mlp.json"));
    QVERIFY(window.current_result()->plan);
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

  void savedPlanIsWhatHeadroomPlanWrites() {
    MainWindow window;
    QVERIFY(window.open_trace(committed("cpu-bert.json")));
    QVERIFY(settle(window));
    QTemporaryDir dir;
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
    QVERIFY(panel->comparison()->item(2, 2)->text().endsWith("%"));
  }

  void runWithoutTheCommandSaysWhy() {
    MainWindow window;
    QVERIFY(window.open_trace(committed("cpu-mlp.json")));
    QVERIFY(settle(window));
    window.run_panel()->set_program({});
    DialogCatcher catcher;
    window.run_panel()->run_button()->click();
    QTRY_COMPARE(catcher.texts().size(), 1);
    QVERIFY(catcher.texts()[0].contains("PATH"));
  }

  void screenshotOfTheMainWindow() {
    MainWindow window;
    window.resize(1400, 880);
    window.show();
    QVERIFY(window.open_trace(committed("cpu-bert.json")));
    QVERIFY(settle(window));
    // A budget where the larger micro-batches do not fit and the plan checkpoints, so every view
    // has something to show.
    const std::int64_t least = window.current_result()->smallest_budget > 0
                                   ? window.current_result()->smallest_budget
                                   : compute_plan(*window.trace(), inputs(1, window.batch_box()->value())).smallest_budget;
    window.budget_control()->field()->setText(QString::fromStdString(core::format_bytes(least + (10 << 20))));
    window.budget_control()->field()->setModified(true);
    emit window.budget_control()->field()->editingFinished();
    QVERIFY(settle(window));
    QVERIFY(window.current_result()->plan);
    QVERIFY(window.throughput_chart()->infeasible_series()->count() > 0);
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QTest::qWait(100);
    const QString path = QStringLiteral(HEADROOM_GUI_SCREENSHOT);
    QVERIFY(window.grab().save(path));
    QVERIFY(QFileInfo(path).size() > 10000);
  }
};

QTEST_MAIN(GuiTest)
#include "gui_test.moc"
