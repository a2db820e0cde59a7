// headroom-gui [TRACE.json]: explore the trade-off between memory and speed for a traced model.
#include <QApplication>
#include <QCommandLineParser>

#include "gui/app/main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
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
  if (!parser.positionalArguments().isEmpty()) window.open_trace(parser.positionalArguments().front());
  return QApplication::exec();
}
