#pragma once
// `headroom compare`: what changed between two traces (a model edit, a libtorch upgrade, another
// device), or two plans, or two reports, and whether it passes a CI threshold. Torch-free: the
// desktop app shows the same comparison.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/report.h"
#include "core/trace.h"

namespace headroom::report {

// One figure, before (BASE) and after (NEW).
struct Change {
  std::string what;  // "kept bytes/sample", "fwd ms/sample", ...
  double base = 0;
  double next = 0;
  double delta() const { return next - base; }
  // (next - base) / base; infinite when something appears from nothing, 0 when both are 0.
  double fraction() const;
  bool operator==(const Change&) const = default;
};

struct LayerComparison {
  std::string name;
  std::string status;          // "changed", "same", "added" (only in NEW), "removed" (only in BASE)
  std::vector<Change> memory;  // bytes per sample: kept, output, forward and backward transient; parameter bytes
  std::vector<Change> time;    // ms per sample: forward, backward (empty when times are not comparable)
  // Per common batch size, the raw figures behind the per-sample ones (for the JSON).
  struct AtBatch {
    std::int64_t batch = 0;
    core::LayerCost base, next;
    bool operator==(const AtBatch&) const = default;
  };
  std::vector<AtBatch> batches;
  // The largest change of memory per sample in bytes, for ordering the table.
  double largest_memory_delta() const;
  bool operator==(const LayerComparison&) const = default;
};

struct PlannedSummary {
  std::int64_t budget_bytes = 0;
  std::int64_t batch = 0;
  Change largest_batch{"largest batch in one step"};  // without micro-batching, under the budget
  Change samples_per_second{"chosen plan samples/s"};  // 0 where no plan fits
  std::string base_plan, next_plan;                    // "2 x 16, 1 ckpt, 3 tempo" or "infeasible"
  bool operator==(const PlannedSummary&) const = default;
};

// The CI thresholds (fractions); a slowdown is checked only when asked for.
struct Thresholds {
  double max_memory_growth = 0.01;
  std::optional<double> max_slowdown;
};

struct TraceComparison {
  std::string base_model, next_model;
  std::vector<std::int64_t> common_batches;
  std::vector<LayerComparison> layers;  // largest memory change first; then added and removed
  std::vector<std::string> added, removed;
  bool times_compared = false;
  std::string times_note;  // why times are left out, when they are
  Change activations_per_sample{"activations bytes/sample"};
  Change parameters{"parameter bytes"};
  // Of the parameters, those that train (the rest frozen: no gradient, no optimizer state).
  Change trainable_parameters{"trainable parameter bytes"};
  Change static_bytes{"static bytes"};
  Change step_peak{"step peak bytes"};        // at the largest common batch
  Change step_time{"step ms/sample"};         // likewise; only when times are compared
  PlannedSummary planned;
  std::vector<std::string> warnings;
  // The first threshold passed, naming the layer responsible; empty when none is.
  std::string failure;
  bool operator==(const TraceComparison&) const = default;
};

struct CompareOptions {
  Thresholds thresholds;
  std::int64_t budget_bytes = 0;  // 0: BASE's peak at the largest common batch, so BASE's batch fits
  std::int64_t batch = 0;         // 0: the largest common batch
};

// Throws InputError when the traces have no batch size in common.
TraceComparison compare_traces(const core::Trace& base, const core::Trace& next, const CompareOptions& options);

// Plans and reports: the choices and the predicted (and measured) figures side by side.
struct ChoiceComparison {
  std::string kind;  // "plan" or "report"
  struct Row {
    std::string what;
    std::string base, next;
    bool changed = false;
    bool operator==(const Row&) const = default;
  };
  std::vector<Row> rows;
  Change peak{"peak bytes"};
  Change samples_per_second{"samples/s"};
  std::optional<Change> measured_peak, measured_samples_per_second;
  std::vector<std::string> warnings;
  std::string failure;
  bool operator==(const ChoiceComparison&) const = default;
};

ChoiceComparison compare_plans(const core::Plan& base, const core::Plan& next, const Thresholds& thresholds);
ChoiceComparison compare_reports(const core::Report& base, const core::Report& next, const Thresholds& thresholds);

}  // namespace headroom::report
