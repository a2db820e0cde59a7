#include "gui/logic/layer_table_model.h"

#include <algorithm>

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
    case 3: return QStringLiteral("tempo");
    default: return QStringLiteral("-");
  }
}

QString time_text(std::int64_t ns, const LayerTableModel::TimeUnit& unit) {
  return QString::number(static_cast<double>(ns) / unit.ns_per_unit, 'f', unit.decimals);
}

}  // namespace

LayerTableModel::TimeUnit LayerTableModel::time_unit(std::int64_t largest_ns) {
  TimeUnit unit;
  if (largest_ns >= 1'000'000'000) unit = {"s", 1e9, 0};
  else if (largest_ns >= 1'000'000) unit = {"ms", 1e6, 0};
  else if (largest_ns >= 1'000) unit = {"us", 1e3, 0};
  else unit = {"ns", 1, 0};
  // Four significant digits for the largest value; smaller ones get the same decimals, so a column
  // lines up and a small layer does not read 0.
  const double largest = static_cast<double>(largest_ns) / unit.ns_per_unit;
  unit.decimals = unit.ns_per_unit == 1 ? 0 : largest >= 100 ? 1 : largest >= 10 ? 2 : 3;
  return unit;
}

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
  timing_batch_ = plan_ ? plan_->choice.micro_batches.front() : trace.batch_sizes.back();
  const core::CostModel costs(trace);
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const auto cost = costs.layer(i, timing_batch_);
    rows_[i].fwd_ns = cost.fwd_ns;
    rows_[i].bwd_ns = cost.bwd_ns;
    const core::LayerStep* step = plan_ && i < plan_->choice.layers.size() ? &plan_->choice.layers[i] : nullptr;
    const bool tempo = step != nullptr && step->variant == core::LayerVariant::Tempo;
    rows_[i].choice = !plan_ ? 0 : (step != nullptr && step->checkpoint ? 2 : (tempo ? 3 : 1));
  }
  std::int64_t largest_fwd = 0, largest_bwd = 0;
  for (const Row& row : rows_) {
    largest_fwd = std::max(largest_fwd, row.fwd_ns);
    largest_bwd = std::max(largest_bwd, row.bwd_ns);
  }
  forward_unit_ = time_unit(largest_fwd);
  backward_unit_ = time_unit(largest_bwd);
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
    case Params: {
      // Frozen parameters hold no gradient or optimizer state: said beside their bytes.
      const QString bytes = QString::fromStdString(core::format_bytes(row.param_bytes));
      if (layer.frozen_param_bytes == 0) return bytes;
      if (layer.frozen_param_bytes == layer.param_bytes) return bytes + QStringLiteral(" frozen");
      return bytes + QStringLiteral(" (%1 frozen)").arg(QString::fromStdString(core::format_bytes(layer.frozen_param_bytes)));
    }
    case KeptPerSample: return QString::fromStdString(core::format_bytes(static_cast<std::int64_t>(row.kept_per_sample)));
    case ForwardTime:
      return role == Qt::ToolTipRole ? QString::fromStdString(core::format_duration_ns(row.fwd_ns))
                                     : time_text(row.fwd_ns, forward_unit_);
    case BackwardTime:
      return role == Qt::ToolTipRole ? QString::fromStdString(core::format_duration_ns(row.bwd_ns))
                                     : time_text(row.bwd_ns, backward_unit_);
    case Choice: return choice_text(row.choice);
    default: return {};
  }
}

QVariant LayerTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation == Qt::Horizontal && role == Qt::ToolTipRole) {
    const QString at = QString::number(timing_batch_);
    switch (section) {
      case Name: return QStringLiteral("the layer, in execution order (sort by this column to restore it)");
      case Kind: return QStringLiteral("the layer's type in the model");
      case Block: return QStringLiteral("the checkpointing block the layer belongs to: a checkpointed block keeps only its input and recomputes the rest in backward");
      case Params: return QStringLiteral("parameter bytes (gradients and optimizer state scale with them)");
      case KeptPerSample:
        return QStringLiteral("bytes the layer's forward keeps for backward, per sample of the micro-batch "
                              "(the slope of kept bytes against batch size)");
      case ForwardTime: return QStringLiteral("forward time at a micro-batch of %1, the plan's largest").arg(at);
      case BackwardTime: return QStringLiteral("backward time at a micro-batch of %1, the plan's largest").arg(at);
      case Choice:
        return QStringLiteral("what the plan does with the layer's activations: stored for backward, checkpointed "
                              "(recomputed in backward), or Tempo (keeps less, recovers the rest)");
      default: return {};
    }
  }
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, orientation, role);
  const QString at = QStringLiteral(" (b=%1)").arg(timing_batch_);
  switch (section) {
    case Name: return QStringLiteral("layer");
    case Kind: return QStringLiteral("kind");
    case Block: return QStringLiteral("block");
    case Params: return QStringLiteral("params");
    case KeptPerSample: return QStringLiteral("kept / sample");
    case ForwardTime: return QStringLiteral("fwd %1").arg(forward_unit_.name) + at;
    case BackwardTime: return QStringLiteral("bwd %1").arg(backward_unit_.name) + at;
    case Choice: return QStringLiteral("plan");
    default: return {};
  }
}

}  // namespace headroom::gui
