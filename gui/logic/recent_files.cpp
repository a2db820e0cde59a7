#include "gui/logic/recent_files.h"

#include <QFileInfo>
#include <QSettings>

namespace headroom::gui {

namespace {
const QString kKey = QStringLiteral("recent_traces");
}

QStringList recent_files() { return QSettings().value(kKey).toStringList(); }

QStringList remember_recent_file(const QString& path) {
  const QString absolute = QFileInfo(path).absoluteFilePath();
  QStringList files = recent_files();
  files.removeAll(absolute);
  files.prepend(absolute);
  while (files.size() > kMaxRecentFiles) files.removeLast();
  QSettings().setValue(kKey, files);
  return files;
}

QStringList forget_recent_file(const QString& path) {
  QStringList files = recent_files();
  files.removeAll(QFileInfo(path).absoluteFilePath());
  QSettings().setValue(kKey, files);
  return files;
}

}  // namespace headroom::gui
