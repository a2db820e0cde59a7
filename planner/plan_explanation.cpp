#include "planner/plan_explanation.h"

#include <sstream>

#include "core/units.h"

namespace headroom::planner {

namespace {

std::string plural(int count, const std::string& word, const std::string& suffix = "s") {
  return std::to_string(count) + " " + word + (count == 1 ? "" : suffix);
}

// Samples/s with enough digits to tell close plans apart.
std::string rate(double samples_per_second) {
  std::ostringstream out;
  out.precision(4);
  out << samples_per_second << " samples/s";
  return out.str();
}

// "+12.3% faster" style: how much faster `a` is than `b`.
std::string faster_by(double a, double b) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << (a / b - 1.0) * 100.0 << "%";
  return out.str();
}

std::string micro_batch_size(const WeighedStep& step) {
  std::string size = std::to_string(step.micro_batches.front());
  if (step.micro_batches.back() != step.micro_batches.front()) size += "/" + std::to_string(step.micro_batches.back());
  return size;
}

std::string with_what(const WeighedStep& step) {
  std::string out;
  if (step.checkpointed_blocks > 0) out += plural(step.checkpointed_blocks, "checkpointed block");
  if (step.lean_layers > 0) out += (out.empty() ? "" : " and ") + plural(step.lean_layers, "lean layer");
  return out.empty() ? "nothing applied" : out;
}

}  // namespace

std::string describe(const WeighedStep& step) {
  std::ostringstream out;
  out << step.micro_batches.size() << " micro-batch" << (step.micro_batches.size() > 1 ? "es" : "") << " of "
      << micro_batch_size(step) << ", " << plural(step.checkpointed_blocks, "checkpointed block");
  if (step.lean_layers > 0) out << ", " << plural(step.lean_layers, "lean layer");
  return out.str();
}

std::string binding_constraint(const ChoiceFacts& f) {
  const WeighedStep& chosen = f.chosen;
  const double chosen_rate = chosen.predicted.samples_per_second;
  const bool whole_fits = f.whole_batch.predicted.peak_bytes <= f.limit_bytes;
  const bool as_is = chosen.micro_batches.size() == 1 && chosen.checkpointed_blocks == 0 && chosen.lean_layers == 0;
  const std::string room = core::format_bytes(f.limit_bytes) + " left after the " + core::format_bytes(f.margin_bytes) +
                           " margin";
  if (as_is) {
    return "none: the whole batch fits (" + core::format_bytes(f.whole_batch.predicted.peak_bytes) + " of " + room + ")";
  }
  if (whole_fits) {
    // Nothing forced the plan: it was chosen because it is predicted faster than the whole batch.
    const bool one_step = chosen.micro_batches.size() == 1;
    std::string why = "speed: " + (one_step ? "the whole batch with " + with_what(chosen) + " runs" : describe(chosen) + " run") +
                      " at " + rate(chosen_rate) + ", " +
                      faster_by(chosen_rate, f.whole_batch.predicted.samples_per_second) +
                      " faster than the whole batch with nothing applied (" +
                      rate(f.whole_batch.predicted.samples_per_second) + "), which also fits (" +
                      core::format_bytes(f.whole_batch.predicted.peak_bytes) + " of " + room + ")";
    if (chosen.lean_layers > 0) {
      why += "; the " + plural(f.lean_measured_faster, "lean layer") + " measured no slower than the standard " +
             (f.lean_measured_faster == 1 ? "one is" : "ones are") + " always used";
    }
    return why;
  }

  std::string why = "memory: the whole batch with nothing applied needs " +
                    core::format_bytes(f.whole_batch.predicted.peak_bytes) + ", over the " + room;
  const WeighedStep& largest = f.largest_fitting;
  if (chosen.micro_batches.front() < largest.micro_batches.front()) {
    // Memory allowed larger micro-batches; the smaller ones were chosen for speed.
    why += "; the largest micro-batches that fit are of " + micro_batch_size(largest) + " (" + with_what(largest) +
           ", " + rate(largest.predicted.samples_per_second) + "), but micro-batches of " + micro_batch_size(chosen) +
           " (" + with_what(chosen) + ") are " + faster_by(chosen_rate, largest.predicted.samples_per_second) +
           " faster: " + rate(chosen_rate);
  } else if (chosen.micro_batches.size() > 1) {
    why += "; micro-batches of " + micro_batch_size(chosen) + " are the largest that fit";
  }
  if (f.peak_without_checkpointing) {
    why += "; without checkpointing micro-batches of " + micro_batch_size(chosen) + " need " +
           core::format_bytes(*f.peak_without_checkpointing);
  }
  if (f.peak_without_tempo) {
    const int for_memory = chosen.lean_layers - f.lean_measured_faster;
    why += "; without Tempo's " + plural(chosen.lean_layers, "lean layer") + " (of " +
           std::to_string(f.lean_candidates) + " that have one) they need " +
           core::format_bytes(*f.peak_without_tempo);
    if (f.lean_measured_faster > 0) {
      why += " (" + std::to_string(f.lean_measured_faster) + " of them measured no slower, used for speed; " +
             std::to_string(for_memory) + " for memory)";
    }
  }
  return why;
}

std::string infeasible_reason(std::int64_t budget_bytes, std::int64_t limit_bytes, std::int64_t floor_bytes,
                              const std::string& strategies, std::int64_t least_peak, std::int64_t smallest_budget) {
  return "no plan fits " + core::format_bytes(budget_bytes) + " (" + core::format_bytes(limit_bytes) +
         " after the margin)" +
         (limit_bytes < floor_bytes ? ", which is below the parameters, gradients and optimizer state with the "
                                      "optimizer's temporaries (" + core::format_bytes(floor_bytes) + ")"
                                    : "") +
         "; with strategies " + (strategies.empty() ? "none" : strategies) + " the step needs at least " +
         core::format_bytes(least_peak) + ", so the budget must be at least " + core::format_bytes(smallest_budget);
}

std::vector<core::RunnerUp> runner_ups(const std::vector<WeighedStep>& losers, const WeighedStep& chosen,
                                       std::size_t count) {
  std::vector<core::RunnerUp> out;
  for (const auto& c : losers) {
    if (out.size() >= count) break;
    core::RunnerUp up;
    up.micro_batch = c.micro_batches.front();
    up.checkpointed_blocks = c.checkpointed_blocks;
    up.predicted = c.predicted;
    std::ostringstream verdict;
    verdict.precision(3);
    verdict << describe(c) << ": slower (" << up.predicted.samples_per_second << " vs "
            << chosen.predicted.samples_per_second << " samples/s)";
    up.verdict = verdict.str();
    out.push_back(up);
  }
  return out;
}

std::vector<std::string> plan_warnings(const core::Trace& trace, const std::vector<std::int64_t>& micro_batches,
                                       std::int64_t global_batch) {
  std::vector<std::string> warnings;
  if (!trace.extras_recorded) {
    warnings.push_back("the trace is from before headroom measured what a model holds besides its parameters and "
                       "what a checkpointed block saves: the predicted peak may be a few KiB low; profile again");
  }
  const std::int64_t largest = micro_batches.front();
  if (largest > trace.batch_sizes.back()) {
    warnings.push_back("micro-batches of " + std::to_string(largest) + " are larger than the largest profiled size (" +
                       std::to_string(trace.batch_sizes.back()) +
                       "): their time is extrapolated; profile with --batch-sizes up to " + std::to_string(largest) +
                       " to measure it");
  }
  if (micro_batches.size() > 1) {
    std::vector<std::string> batchnorm;
    for (const auto& layer : trace.layers) {
      if (layer.kind.find("batchnorm") != std::string::npos) batchnorm.push_back(layer.name);
    }
    if (!batchnorm.empty()) {
      std::string names;
      for (std::size_t i = 0; i < batchnorm.size() && i < 3; ++i) names += (i ? ", " : "") + batchnorm[i];
      if (batchnorm.size() > 3) names += " and " + std::to_string(batchnorm.size() - 3) + " more";
      warnings.push_back(std::to_string(batchnorm.size()) + " BatchNorm layer" + (batchnorm.size() > 1 ? "s" : "") +
                         " (" + names + ") normalize over micro-batches of " + std::to_string(largest) +
                         " samples, not the global batch of " + std::to_string(global_batch) +
                         ": statistics and gradients differ from full-batch training (execute with "
                         "--batchnorm-eval to normalize with running statistics instead)");
    }
  }
  return warnings;
}

}  // namespace headroom::planner
