#include "gui/logic/layer_table_model.h"

#include "core/cost_model.h"
#include "core/units.h"

namespace headroom::gui {

namespace {

// Kept bytes grow affinely with the batch: the slope between the smallest and largest samples.
double kept_per_sample(const core::LayerProfile& layer) {
  if (layer.samples.empty()) return 0;
  const auto& first = layer.samples.front();
  const auto& last = layer.samples.back();
  if (last.batch == first.batch) return static_cast<double>(last.kept_bytes) / static_cast<double>(last.batch);
  return static_cast<double>(last.kept_bytes - first.kept_bytes) / static_cast<double>(last.batch - first.batch);
}

QString choice_text(int choice) {
  switch (choice) {
    case 1: return QStringLiteral("stored");
    case 2: return QStringLiteral("checkpointed");
    case 3: return QStringLiteral("lean (tempo)");
    default: return QStringLiteral("-");
  }
}

}  // namespace

void LayerTableModel::set_trace(std::shared_ptr<const TraceDocument> trace) {
  beginResetModel();
  trace_ = std::move(trace);
  plan_.reset();
  rows_.clear();
  if (trace_) {
    for (const auto& layer : trace_->trace.layers) rows_.push_back({layer.param_bytes, kept_per_sample(layer), 0, 0, 0});
  }
  recompute_plan_columns();
  endResetModel();
}

void LayerTableModel::set_plan(const std::optional<core::Plan>& plan) {
  plan_ = plan;
  recompute_plan_columns();
  // Only the plan's columns change, so sorting and selection stay where the user left them.
  if (!rows_.empty()) emit dataChanged(index(0, Choice), index(rowCount() - 1, BackwardTime));
  emit headerDataChanged(Qt::Horizontal, ForwardTime, BackwardTime);
}

void LayerTableModel::recompute_plan_columns() {
  if (!trace_) return;
  const auto& trace = trace_->trace;
  timing_batch_ = plan_ ? plan_->micro_batches.front() : trace.batch_sizes.back();
  const core::CostModel costs(trace);
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const auto cost = costs.layer(i, timing_batch_);
    rows_[i].fwd_ns = cost.fwd_ns;
    rows_[i].bwd_ns = cost.bwd_ns;
    const core::LayerChoice* choice = plan_ && i < plan_->layers.size() ? &plan_->layers[i] : nullptr;
    rows_[i].choice = !plan_ ? 0 : (choice != nullptr && choice->checkpoint ? 2 : (choice != nullptr && choice->tempo ? 3 : 1));
  }
}

int LayerTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int LayerTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant LayerTableModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const auto& layer = trace_->trace.layers[static_cast<std::size_t>(index.row())];
  const Row& row = rows_[static_cast<std::size_t>(index.row())];
  if (role == Qt::TextAlignmentRole) {
    const bool text = index.column() == Name || index.column() == Kind || index.column() == Choice;
    return QVariant::fromValue(Qt::Alignment(text ? Qt::AlignLeft | Qt::AlignVCenter : Qt::AlignRight | Qt::AlignVCenter));
  }
  if (role == kSortRole) {
    switch (index.column()) {
      case Name: return layer.id;  // execution order
      case Kind: return QString::fromStdString(layer.kind);
      case Block: return layer.block;
      case Params: return static_cast<qlonglong>(row.param_bytes);
      case KeptPerSample: return row.kept_per_sample;
      case ForwardTime: return static_cast<qlonglong>(row.fwd_ns);
      case BackwardTime: return static_cast<qlonglong>(row.bwd_ns);
      case Choice: return row.choice;
      default: return {};
    }
  }
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  switch (index.column()) {
    case Name: return QString::fromStdString(layer.name);
    case Kind: return QString::fromStdString(layer.kind);
    case Block: return layer.block < 0 ? QStringLiteral("-") : QString::number(layer.block);
    case Params: return QString::fromStdString(core::format_bytes(row.param_bytes));
    case KeptPerSample: return QString::fromStdString(core::format_bytes(static_cast<std::int64_t>(row.kept_per_sample)));
    case ForwardTime: return QString::fromStdString(core::format_duration_ns(row.fwd_ns));
    case BackwardTime: return QString::fromStdString(core::format_duration_ns(row.bwd_ns));
    case Choice: return choice_text(row.choice);
    default: return {};
  }
}

QVariant LayerTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, orientation, role);
  const QString at = QStringLiteral(" (b=%1)").arg(timing_batch_);
  switch (section) {
    case Name: return QStringLiteral("layer");
    case Kind: return QStringLiteral("kind");
    case Block: return QStringLiteral("block");
    case Params: return QStringLiteral("params");
    case KeptPerSample: return QStringLiteral("kept / sample");
    case ForwardTime: return QStringLiteral("fwd") + at;
    case BackwardTime: return QStringLiteral("bwd") + at;
    case Choice: return QStringLiteral("plan");
    default: return {};
  }
}

}  // namespace headroom::gui
