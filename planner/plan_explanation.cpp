#include "planner/plan_explanation.h"

#include <sstream>

#include "core/units.h"
#include "planner/l2l_model.h"

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

// A share as "12.3%".
std::string percent(double share) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << share * 100.0 << "%";
  return out.str();
}

// "+12.3% faster" style: how much faster `a` is than `b`.
std::string faster_by(double a, double b) { return percent(a / b - 1.0); }

std::string micro_batch_size(const WeighedStep& step) {
  std::string size = std::to_string(step.micro_batches.largest);
  if (step.micro_batches.smallest != step.micro_batches.largest) size += "/" + std::to_string(step.micro_batches.smallest);
  return size;
}

std::string with_what(const WeighedStep& step) {
  std::string out;
  if (step.checkpointed_blocks > 0) out += plural(step.checkpointed_blocks, "checkpointed block");
  if (step.tempo_layers > 0) out += (out.empty() ? "" : " and ") + plural(step.tempo_layers, "Tempo layer");
  if (step.l2l) out += (out.empty() ? "" : " and ") + std::string("L2L");
  return out.empty() ? "nothing applied" : out;
}

// Why `chosen` was taken over `other`, as fast to the trace (planner::preferred_on_a_tie).
std::string tie_broken_by(const WeighedStep& chosen, const WeighedStep& other) {
  if (chosen.checkpointed_blocks != other.checkpointed_blocks) return "the fewer checkpointed blocks taken";
  if (chosen.tempo_layers != other.tempo_layers) return "the fewer Tempo layers taken";
  if (chosen.micro_batches.largest != other.micro_batches.largest) return "the larger micro-batches taken";
  return "the fewer micro-batches taken";
}

}  // namespace

std::string describe(const WeighedStep& step) {
  std::ostringstream out;
  out << step.micro_batches.count << " micro-batch" << (step.micro_batches.count > 1 ? "es" : "") << " of "
      << micro_batch_size(step) << ", " << plural(step.checkpointed_blocks, "checkpointed block");
  if (step.tempo_layers > 0) out << ", " << plural(step.tempo_layers, "Tempo layer");
  if (step.l2l) {
    out << ", L2L with boundaries on the " << (step.l2l->boundaries_on_host ? "host" : "device");
    if (!step.l2l->whole_model()) out << " from block " << step.l2l->from_block;
  }
  return out.str();
}

namespace {

// "; <the fastest> is predicted 0.3% faster (...), less than the trace's timings resolve (1.2%; ...):
// the fewer checkpointed blocks taken", where the chosen plan won a tie; else empty.
std::string tie_note(const ChoiceFacts& f) {
  if (!f.faster_on_a_tie) return "";
  const double faster = f.faster_on_a_tie->predicted.samples_per_second;
  return "; " + describe(*f.faster_on_a_tie) + " is predicted " + faster_by(faster, f.chosen.predicted.samples_per_second) +
         " faster (" + rate(faster) + "), less than the trace's timings resolve (" + percent(f.timing_resolution) +
         "; longer timing rounds resolve more: profile --timing-seconds): " + tie_broken_by(f.chosen, *f.faster_on_a_tie);
}

}  // namespace

std::string binding_constraint(const ChoiceFacts& f) {
  const WeighedStep& chosen = f.chosen;
  const double chosen_rate = chosen.predicted.samples_per_second;
  const bool whole_fits = f.whole_batch.predicted.peak_bytes <= f.limit_bytes;
  const bool as_is =
      chosen.micro_batches.count == 1 && chosen.checkpointed_blocks == 0 && chosen.tempo_layers == 0 && !chosen.l2l;
  const std::string room = core::format_bytes(f.limit_bytes) + " left after the " + core::format_bytes(f.margin_bytes) +
                           " margin";
  if (as_is) {
    return "none: the whole batch fits (" + core::format_bytes(f.whole_batch.predicted.peak_bytes) + " of " + room + ")" +
           tie_note(f);
  }
  if (whole_fits) {
    // Nothing forced the plan: it was chosen because it is predicted faster than the whole batch.
    const bool one_step = chosen.micro_batches.count == 1;
    std::string why = "speed: " + (one_step ? "the whole batch with " + with_what(chosen) + " runs" : describe(chosen) + " run") +
                      " at " + rate(chosen_rate) + ", " +
                      faster_by(chosen_rate, f.whole_batch.predicted.samples_per_second) +
                      " faster than the whole batch with nothing applied (" +
                      rate(f.whole_batch.predicted.samples_per_second) + "), which also fits (" +
                      core::format_bytes(f.whole_batch.predicted.peak_bytes) + " of " + room + ")";
    if (chosen.tempo_layers > 0) {
      why += "; the " + plural(f.tempo_measured_faster, "Tempo layer") + " measured no slower than the standard " +
             (f.tempo_measured_faster == 1 ? "one is" : "ones are") + " always used";
    }
    return why + tie_note(f);
  }

  std::string why = "memory: the whole batch with nothing applied needs " +
                    core::format_bytes(f.whole_batch.predicted.peak_bytes) + ", over the " + room;
  const WeighedStep& largest = f.largest_fitting;
  if (chosen.micro_batches.largest < largest.micro_batches.largest) {
    // Memory allowed larger micro-batches; the smaller ones were chosen for speed.
    why += "; the largest micro-batches that fit are of " + micro_batch_size(largest) + " (" + with_what(largest) +
           ", " + rate(largest.predicted.samples_per_second) + "), but micro-batches of " + micro_batch_size(chosen) +
           " (" + with_what(chosen) + ") are " + faster_by(chosen_rate, largest.predicted.samples_per_second) +
           " faster: " + rate(chosen_rate);
  } else if (chosen.micro_batches.count > 1) {
    why += "; micro-batches of " + micro_batch_size(chosen) + " are the largest that fit";
  }
  if (chosen.l2l) {
    // The search weighs L2L only where no plan without it fits.
    why += std::string("; no plan without it fits, so they run as L2L (boundaries on the ") +
           (chosen.l2l->boundaries_on_host ? "host" : "device") +
           "), the device holding two blocks' parameters instead of the model's parameters, gradients and optimizer state";
    if (!chosen.l2l->whole_model()) {
      why += " from block " + std::to_string(chosen.l2l->from_block) + " on (the layers before it train on the device, "
             "with no copies: the fastest L2L choice that fits)";
    }
  }
  why += tie_note(f);
  if (f.peak_without_checkpointing) {
    why += "; without checkpointing micro-batches of " + micro_batch_size(chosen) + " need " +
           core::format_bytes(*f.peak_without_checkpointing);
  }
  if (f.peak_without_tempo) {
    const int for_memory = chosen.tempo_layers - f.tempo_measured_faster;
    why += "; without the " + plural(chosen.tempo_layers, "Tempo layer") + " (of " +
           std::to_string(f.tempo_candidates) + " layers with a Tempo variant) they need " +
           core::format_bytes(*f.peak_without_tempo);
    if (f.tempo_measured_faster > 0) {
      why += " (" + std::to_string(f.tempo_measured_faster) + " of them measured no slower, used for speed; " +
             std::to_string(for_memory) + " for memory)";
    }
  }
  return why;
}

std::string infeasible_reason(std::int64_t budget_bytes, std::int64_t limit_bytes, std::int64_t floor_bytes,
                              const std::string& strategies, std::int64_t least_peak, std::int64_t smallest_budget,
                              bool floor_has_workspace) {
  return "no plan fits " + core::format_bytes(budget_bytes) + " (" + core::format_bytes(limit_bytes) +
         " after the margin)" +
         (limit_bytes < floor_bytes ? ", which is below the parameters, gradients and optimizer state with the "
                                      "optimizer's temporaries" +
                                          std::string(floor_has_workspace ? " and the device libraries' workspace" : "") +
                                          " (" + core::format_bytes(floor_bytes) + ")"
                                    : "") +
         "; with strategies " + (strategies.empty() ? "none" : strategies) + " the step needs at least " +
         core::format_bytes(least_peak) + ", so the budget must be at least " + core::format_bytes_at_least(smallest_budget);
}

std::vector<core::RunnerUp> runner_ups(const std::vector<WeighedStep>& losers, const WeighedStep& chosen,
                                       std::size_t count, double timing_resolution) {
  std::vector<core::RunnerUp> out;
  for (const auto& c : losers) {
    if (out.size() >= count) break;
    core::RunnerUp up;
    up.micro_batch = c.micro_batches.largest;
    up.checkpointed_blocks = c.checkpointed_blocks;
    up.predicted = c.predicted;
    std::ostringstream verdict;
    verdict.precision(3);
    verdict << describe(c);
    if (up.predicted.samples_per_second > chosen.predicted.samples_per_second) {
      verdict << ": faster by less than the trace resolves (" << up.predicted.samples_per_second << " vs "
              << chosen.predicted.samples_per_second << " samples/s, " << percent(timing_resolution) << " resolved), "
              << tie_broken_by(chosen, c);
    } else {
      verdict << ": slower (" << up.predicted.samples_per_second << " vs " << chosen.predicted.samples_per_second
              << " samples/s)";
    }
    up.verdict = verdict.str();
    out.push_back(up);
  }
  return out;
}

std::string l2l_note(const L2LPrediction& p, const core::L2LChoice& l2l) {
  const bool boundaries_on_host = l2l.boundaries_on_host;
  std::string kept;
  if (p.kept_stages > 0) {
    kept = " from block " + std::to_string(l2l.from_block) + " on: " +
           (p.kept_stages == 1 ? "the first of the " + std::to_string(p.stages) + " stages stays"
                               : "the first " + std::to_string(p.kept_stages) + " of the " + std::to_string(p.stages) + " stages stay") +
           " on the device (" + core::format_bytes(p.kept_bytes) +
           " of parameters and optimizer state, stepped there); the others'";
  }
  return "L2L" + kept +
         std::string(boundaries_on_host ? (kept.empty() ? ": parameters, gradients, optimizer state and the stashed block boundaries"
                                                        : " parameters, gradients, optimizer state and the stashed block boundaries")
                                        : (kept.empty() ? ": parameters, gradients and optimizer state"
                                                        : " parameters, gradients and optimizer state")) +
         " live on the host (" + core::format_bytes(p.host_bytes) + "); the device holds two of the " +
         std::to_string(p.stages - p.kept_stages) + " offloaded stages' parameters at a time (the largest " +
         core::format_bytes(p.largest_stage_parameter_bytes) + "), " + (boundaries_on_host ? "" : "the stashed block boundaries, ") +
         "every micro-batch's input and one stage's work; every stage runs its forward twice; " +
         (p.copy_ns > 0 ? "the step is predicted " + describe_l2l_bound(p) + " (" + core::format_bytes(p.copy_bytes) +
                              " of copies)"
                        : "the predicted time leaves out the " + core::format_bytes(p.copy_bytes) +
                              " of copies (the trace measured no copy bandwidth; profile again to time them)");
}

namespace {

// "12.3M parameters"
std::string parameter_count(double count) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(count >= 1e12 ? 2 : 1);
  if (count >= 1e12) {
    out << count / 1e12 << "T";
  } else if (count >= 1e9) {
    out << count / 1e9 << "B";
  } else if (count >= 1e6) {
    out << count / 1e6 << "M";
  } else if (count >= 1e3) {
    out << count / 1e3 << "K";
  } else {
    out.precision(0);
    out << count;
  }
  return out.str() + " parameters";
}

}  // namespace

std::string l2l_capacity_line(const L2LCapacity& c, bool boundaries_on_host, const std::vector<std::int64_t>& micro_batches,
                              std::int64_t host_memory_bytes) {
  std::string where = std::string("boundaries on the ") + (boundaries_on_host ? "host" : "device") + ", " +
                      std::to_string(micro_batches.size()) + " micro-batch" + (micro_batches.size() == 1 ? "" : "es") +
                      " of " + std::to_string(micro_batches.front());
  if (micro_batches.back() != micro_batches.front()) where += "/" + std::to_string(micro_batches.back());
  if (!c.fits) {
    return "with " + where + ": not even this model (" + parameter_count(c.parameters) + "; device peak " +
           core::format_bytes(c.device_peak_bytes) + "): bound by the " + c.bound;
  }
  if (c.block.empty()) return "with " + where + ": this model (" + parameter_count(c.parameters) + "); " + c.bound;
  const double per_block = static_cast<double>(c.block_parameter_bytes) / c.bytes_per_parameter;
  std::string line = "with " + where + ": ";
  if (c.unbounded) {
    return line + "no limit from the device (each block like " + c.block + ", " + parameter_count(per_block) +
           ", adds nothing to its peak of " + core::format_bytes(c.device_peak_bytes) + ") and the host's memory is unknown";
  }
  line += "about " + parameter_count(c.parameters) + " (this model with " + std::to_string(c.extra_blocks) +
          " more blocks like " + c.block + ", " + parameter_count(per_block) + " each); bound by the " + c.bound;
  if (c.bound == "host memory") line += " (" + core::format_bytes(host_memory_bytes) + " available)";
  line += ": a block adds " + core::format_bytes(c.host_bytes_per_block) + " on the host and " +
          (c.device_bytes_per_block > 0 ? core::format_bytes(c.device_bytes_per_block) + " of stashed boundaries on the device"
                                        : std::string("nothing on the device"));
  return line;
}

MicroBatchSizes MicroBatchSizes::of(const std::vector<std::int64_t>& sizes) {
  return sizes.empty() ? MicroBatchSizes{} : MicroBatchSizes{static_cast<std::int64_t>(sizes.size()), sizes.front(), sizes.back()};
}

std::vector<std::string> plan_warnings(const core::Trace& trace, const MicroBatchSizes& micro_batches, std::int64_t global_batch) {
  std::vector<std::string> warnings;
  if (!trace.extras_recorded) {
    warnings.push_back("the trace is from before headroom measured what a model holds besides its parameters and "
                       "what a checkpointed block saves: the predicted peak may be a few KiB low; profile again");
  }
  const std::int64_t largest = micro_batches.largest;
  if (largest > trace.batch_sizes.back()) {
    warnings.push_back("micro-batches of " + std::to_string(largest) + " are larger than the largest profiled size (" +
                       std::to_string(trace.batch_sizes.back()) +
                       "): their time is extrapolated; profile with --batch-sizes up to " + std::to_string(largest) +
                       " to measure it");
  }
  if (micro_batches.count > 1) {
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
