#pragma once
// The traces opened last, newest first, kept in QSettings (the application's organization and
// name decide where; tests set their own).
#include <QString>
#include <QStringList>

namespace headroom::gui {

inline constexpr int kMaxRecentFiles = 8;

QStringList recent_files();
// Moves `path` to the front; returns the new list.
QStringList remember_recent_file(const QString& path);
QStringList forget_recent_file(const QString& path);

}  // namespace headroom::gui
