#pragma once
// The trace's layers as a table: what each costs and what the current plan does with it. Display
// text is formatted; kSortRole gives the raw number so a QSortFilterProxyModel sorts by value. Each
// time column is in one unit (named in its header), so its numbers compare by eye.
#include <QAbstractTableModel>

#include <memory>
#include <optional>

#include "core/plan.h"
#include "gui/logic/trace_document.h"

namespace headroom::gui {

class LayerTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  // The plan's choice comes right after the name: it is what changes as the controls move.
  enum Column { Name, Choice, Kind, Block, Params, KeptPerSample, ForwardTime, BackwardTime, ColumnCount };
  static constexpr int kSortRole = Qt::UserRole + 1;

  using QAbstractTableModel::QAbstractTableModel;

  void set_trace(std::shared_ptr<const TraceDocument> trace);
  // Times are shown at the plan's largest micro-batch; no plan: at the largest profiled size.
  void set_plan(const std::optional<core::Plan>& plan);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  std::int64_t timing_batch() const { return timing_batch_; }

  // One unit for a column of durations: the one that reads its largest value best.
  struct TimeUnit {
    const char* name = "ms";
    double ns_per_unit = 1e6;
    int decimals = 2;
  };
  static TimeUnit time_unit(std::int64_t largest_ns);

 private:
  struct Row {
    std::int64_t param_bytes = 0;
    double kept_per_sample = 0;
    std::int64_t fwd_ns = 0, bwd_ns = 0;
    int choice = 0;  // 0 no plan, 1 stored, 2 checkpointed
  };
  void recompute_plan_columns();

  std::shared_ptr<const TraceDocument> trace_;
  std::optional<core::Plan> plan_;
  std::vector<Row> rows_;
  std::int64_t timing_batch_ = 0;
  TimeUnit forward_unit_, backward_unit_;
};

}  // namespace headroom::gui
