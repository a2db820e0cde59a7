#include "gui/app/frozen_column_table.h"

#include <QHeaderView>
#include <QScrollBar>

namespace headroom::gui {

FrozenColumnTableView::FrozenColumnTableView(QWidget* parent) : QTableView(parent) {
  frozen_ = new QTableView(this);
  frozen_->setObjectName("frozenColumn");
  frozen_->setFocusPolicy(Qt::NoFocus);
  frozen_->verticalHeader()->hide();
  frozen_->horizontalHeader()->setSectionResizeMode(QHeaderView::Fixed);
  frozen_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  frozen_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  frozen_->setVerticalScrollMode(ScrollPerPixel);
  // Its right edge separates the names from the columns scrolling under them.
  frozen_->setStyleSheet("QTableView { border: none; border-right: 1px solid palette(mid); }");
  viewport()->stackUnder(frozen_);
  setHorizontalScrollMode(ScrollPerPixel);
  setVerticalScrollMode(ScrollPerPixel);

  connect(horizontalHeader(), &QHeaderView::sectionResized, this, [this](int section, int, int size) {
    if (section != 0) return;
    frozen_->setColumnWidth(0, size);
    update_frozen_geometry();
  });
  connect(verticalHeader(), &QHeaderView::sectionResized, this,
          [this](int section, int, int size) { frozen_->setRowHeight(section, size); });
  connect(frozen_->verticalScrollBar(), &QAbstractSlider::valueChanged, verticalScrollBar(), &QAbstractSlider::setValue);
  connect(verticalScrollBar(), &QAbstractSlider::valueChanged, frozen_->verticalScrollBar(), &QAbstractSlider::setValue);
  // One sort order, whichever header is clicked.
  connect(frozen_->horizontalHeader(), &QHeaderView::sectionClicked, this, [this] {
    const bool ascending = horizontalHeader()->sortIndicatorSection() != 0 ||
                           horizontalHeader()->sortIndicatorOrder() == Qt::DescendingOrder;
    sortByColumn(0, ascending ? Qt::AscendingOrder : Qt::DescendingOrder);
  });
  connect(horizontalHeader(), &QHeaderView::sortIndicatorChanged, this, [this](int section, Qt::SortOrder order) {
    frozen_->horizontalHeader()->setSortIndicatorShown(section == 0);
    frozen_->horizontalHeader()->setSortIndicator(section, order);
  });
}

void FrozenColumnTableView::setModel(QAbstractItemModel* model) {
  QTableView::setModel(model);
  frozen_->setModel(model);
  frozen_->setSelectionModel(selectionModel());
  hide_scrolling_columns();
  // Columns can come and go with the model's resets.
  connect(model, &QAbstractItemModel::modelReset, this, &FrozenColumnTableView::hide_scrolling_columns);
  connect(model, &QAbstractItemModel::columnsInserted, this, &FrozenColumnTableView::hide_scrolling_columns);
  update_frozen_geometry();
  frozen_->show();
}

void FrozenColumnTableView::setAlternatingRowColors(bool enable) {
  QTableView::setAlternatingRowColors(enable);
  frozen_->setAlternatingRowColors(enable);
}

void FrozenColumnTableView::hide_scrolling_columns() {
  if (!model()) return;
  for (int column = 1; column < model()->columnCount(); ++column) frozen_->setColumnHidden(column, true);
  frozen_->setColumnWidth(0, columnWidth(0));
  frozen_->setSelectionBehavior(selectionBehavior());
  frozen_->verticalHeader()->setDefaultSectionSize(verticalHeader()->defaultSectionSize());
}

void FrozenColumnTableView::resizeEvent(QResizeEvent* event) {
  QTableView::resizeEvent(event);
  update_frozen_geometry();
}

void FrozenColumnTableView::update_frozen_geometry() {
  frozen_->setGeometry(verticalHeader()->width() + frameWidth(), frameWidth(), columnWidth(0),
                       viewport()->height() + horizontalHeader()->height());
}

QModelIndex FrozenColumnTableView::moveCursor(CursorAction cursor_action, Qt::KeyboardModifiers modifiers) {
  QModelIndex current = QTableView::moveCursor(cursor_action, modifiers);
  // Moving left onto a column hidden under the frozen one scrolls it out from under it.
  if (cursor_action == MoveLeft && current.column() > 0 && visualRect(current).topLeft().x() < frozen_->columnWidth(0)) {
    const int to = horizontalScrollBar()->value() + visualRect(current).topLeft().x() - frozen_->columnWidth(0);
    horizontalScrollBar()->setValue(to);
  }
  return current;
}

void FrozenColumnTableView::scrollTo(const QModelIndex& index, ScrollHint hint) {
  // The frozen column is always in view: bring its row into view without scrolling sideways.
  const int sideways = horizontalScrollBar()->value();
  QTableView::scrollTo(index, hint);
  if (index.column() == 0) horizontalScrollBar()->setValue(sideways);
}

}  // namespace headroom::gui
