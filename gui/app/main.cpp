// headroom-gui [TRACE.json]: explore the trade-off between memory and speed for a traced model.
#include <QCommandLineParser>

#include "gui/app/guarded_application.h"
#include "gui/app/main_window.h"

int main(int argc, char** argv) {
  headroom::gui::GuardedApplication app(argc, argv);
  QApplication::setOrganizationName("headroom");
  QApplication::setApplicationName("headroom-gui");
  QApplication::setApplicationVersion(HEADROOM_VERSION);

  QCommandLineParser parser;
  parser.setApplicationDescription("Plan neural-network training under a memory budget, interactively.");
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument("trace", "trace from headroom profile to open");
  parser.process(app);

  headroom::gui::MainWindow window;
  window.resize(1400, 880);
  window.show();
  QObject::connect(&app, &headroom::gui::GuardedApplication::uncaughtError, &window,
                   [&window](const QString& message) { window.show_error("Unexpected error (the action was abandoned)", message); });
  // A bad trace here is shown like one opened from the menu: the window stays, empty.
  if (!parser.positionalArguments().isEmpty()) window.open_trace(parser.positionalArguments().front());
  return QApplication::exec();
}
