#pragma once
// A trace opened in the GUI: the file it came from (absolute, as plans record it), its sha256 and
// the parsed trace. Shared, immutable, so a plan request in flight keeps the trace it was made for
// even after another one is opened.
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/trace.h"

namespace headroom::gui {

struct TraceDocument {
  std::string path;
  std::string sha256;
  core::Trace trace;  // its times rescaled to this machine where it runs at another speed
  // How the trace's times compare with this machine's (core::times_here), shown with each plan;
  // empty until the machine is timed, or where they agree.
  std::string machine_note;
  // The same for each precision the trace measured (each was timed apart): what machine_note
  // becomes when that precision is chosen.
  std::map<core::Precision, std::string> machine_notes;
};

// Throws core::InputError naming the file (and the JSON path of the first problem).
std::shared_ptr<const TraceDocument> load_trace_document(const std::string& path);

// The budgets the controls offer for a trace at a global batch: from its parameters, gradients and
// optimizer state (nothing smaller fits without L2L), or L2L's least where L2L can run the
// model, to past both the device's memory and the whole batch's need, so the slider reaches every
// interesting plan and the device's total can be marked on it.
struct BudgetRange {
  std::int64_t least_bytes = 0;
  std::int64_t most_bytes = 0;
  std::int64_t device_bytes = 0;       // 0 when the trace does not say
  std::int64_t whole_batch_bytes = 0;  // the whole batch without strategies
};
// `optimizer`: the one planned for when it is not the trace's (its state is then estimated, as the
// planner does); empty: the trace's.
BudgetRange budget_range(const core::Trace& trace, std::int64_t global_batch, const std::string& optimizer = {});

// A budget slider is logarithmic: the interesting budgets span from megabytes to the device's total.
inline constexpr int kBudgetSliderSteps = 1000;
int budget_to_slider(std::int64_t bytes, const BudgetRange& range);
std::int64_t slider_to_budget(int position, const BudgetRange& range);

// A starting point for a freshly opened trace: twice the largest profiled batch (at most
// planner::kMaxGlobalBatch), so there is
// something to split, under a budget between the least any plan needs and what the whole batch needs.
struct StartingInputs {
  std::int64_t global_batch = 0;
  std::int64_t budget_bytes = 0;
};
StartingInputs starting_inputs(const core::Trace& trace);

}  // namespace headroom::gui
