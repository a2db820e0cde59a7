#pragma once
// A table whose first column stays put while the others scroll sideways, so a row's name is in
// view whatever column is read (Qt's "frozen column" pattern: a second view over the same model
// and selection, showing only that column, laid over the first).
#include <QTableView>

namespace headroom::gui {

class FrozenColumnTableView : public QTableView {
  Q_OBJECT
 public:
  explicit FrozenColumnTableView(QWidget* parent = nullptr);

  void setModel(QAbstractItemModel* model) override;
  void setAlternatingRowColors(bool enable);

  QTableView* frozen_view() const { return frozen_; }

 protected:
  void resizeEvent(QResizeEvent* event) override;
  QModelIndex moveCursor(CursorAction cursor_action, Qt::KeyboardModifiers modifiers) override;
  void scrollTo(const QModelIndex& index, ScrollHint hint = EnsureVisible) override;

 private:
  void update_frozen_geometry();
  void hide_scrolling_columns();

  QTableView* frozen_;
};

}  // namespace headroom::gui
