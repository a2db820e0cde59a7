#pragma once
// The last resort: an exception that escapes a slot or an event handler (on the GUI thread or the
// planner's) would otherwise unwind out of the event loop and terminate the app, losing whatever
// the user had open. Every place that can fail catches and shows its own error (MainWindow's
// banner); this catches what they missed, reports it through `uncaughtError` and keeps the event
// loop running. What was being done when it threw is abandoned, not retried.
#include <QApplication>
#include <QString>

namespace headroom::gui {

class GuardedApplication : public QApplication {
  Q_OBJECT
 public:
  GuardedApplication(int& argc, char** argv) : QApplication(argc, argv) {}

  bool notify(QObject* receiver, QEvent* event) override;

 signals:
  // Emitted on the thread that threw; connect with the default (auto) connection so a receiver on
  // the GUI thread gets it there.
  void uncaughtError(const QString& message);
};

}  // namespace headroom::gui
