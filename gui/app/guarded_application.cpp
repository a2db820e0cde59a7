#include "gui/app/guarded_application.h"

#include <QtGlobal>

#include <exception>

namespace headroom::gui {

bool GuardedApplication::notify(QObject* receiver, QEvent* event) {
  QString message;
  try {
    return QApplication::notify(receiver, event);
  } catch (const std::exception& e) {
    message = QString::fromUtf8(e.what());
  } catch (...) {
    message = QStringLiteral("an exception that is not a std::exception");
  }
  // On stderr too: if reporting itself fails, or no one listens, the reason is not lost.
  qCritical("headroom-gui: unexpected error, the action was abandoned: %s", qUtf8Printable(message));
  try {
    emit uncaughtError(message);
  } catch (...) {
    qCritical("headroom-gui: reporting the error failed as well");
  }
  // The event was not handled.
  return false;
}

}  // namespace headroom::gui
