#include "report/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "core/units.h"
#include "report/text_table.h"

namespace headroom::report {

namespace {

std::string rate(double samples_per_second) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", samples_per_second);
  return buffer;
}

std::string seconds(double s) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4f", s);
  return buffer;
}

}  // namespace

std::string render_plan_summary(const core::Plan& plan) {
  std::ostringstream out;
  const std::int64_t allowed = plan.budget_bytes - plan.margin_bytes;
  out << "plan for " << plan.model << " (" << plan.device << " trace " << plan.trace_path << "), global batch "
      << plan.global_batch << ", budget " << core::format_bytes(plan.budget_bytes) << " (margin "
      << core::format_bytes(plan.margin_bytes) << ")\n\n";

  const auto& micro_batches = plan.choice.micro_batches;
  const auto& checkpointed = plan.choice.checkpointed_blocks;
  std::int64_t first = micro_batches.front(), last = micro_batches.back();
  std::size_t of_first = 0;
  for (const auto b : micro_batches) of_first += b == first;
  out << "  micro-batches    " << of_first << " x " << first;
  if (last != first) out << " + " << micro_batches.size() - of_first << " x " << last;
  // A contrastive model's micro-batches share one loss over the whole batch (a gradient cache).
  out << (std::any_of(plan.warnings.begin(), plan.warnings.end(),
                      [](const std::string& w) { return w.rfind("contrastive step: gradient cache", 0) == 0; })
              ? "  (gradient cache: one loss over the whole batch)\n"
              : "  (loss weight b_i/B)\n");
  if (plan.choice.world_size > 1) {
    // Workers whose micro-batches are alike, run by run: "workers 0-1: 2 x 4".
    const auto& c = plan.choice;
    out << "  data parallel    " << c.world_size << " workers:";
    int from = 0;
    for (int r = 1; r <= c.world_size; ++r) {
      if (r < c.world_size && c.worker_micro_batches(r) == c.worker_micro_batches(from)) continue;
      const auto sizes = c.worker_micro_batches(from);
      std::int64_t samples = 0;
      for (const auto b : sizes) samples += b;
      out << (from > 0 ? ";" : "") << (r - 1 > from ? " workers " + std::to_string(from) + "-" + std::to_string(r - 1)
                                                      : " worker " + std::to_string(from))
          << " " << samples << " samples as " << sizes.size() << " x " << sizes.front()
          << (sizes.back() != sizes.front() ? ".." + std::to_string(sizes.back()) : "");
      from = r;
    }
    out << "\n                   gradients all-reduced in buckets of " << core::format_bytes(c.bucket_cap_bytes)
        << " over a ring, link " << core::format_link(c.link) << " (" << c.link.source << ")\n";
  }
  out << "  checkpointed     ";
  if (checkpointed.empty()) {
    out << "none\n";
  } else {
    out << checkpointed.size() << " block" << (checkpointed.size() > 1 ? "s" : "") << ":";
    for (const int b : checkpointed) out << " " << b;
    out << "\n";
  }
  std::vector<std::string> lean;
  for (const auto& layer : plan.choice.layers) {
    if (layer.variant == core::LayerVariant::Tempo) lean.push_back(layer.name);
  }
  out << "  tempo (lean)     ";
  if (lean.empty()) {
    out << "none\n";
  } else {
    out << lean.size() << " layer" << (lean.size() > 1 ? "s" : "") << ":";
    for (std::size_t i = 0; i < lean.size() && i < 4; ++i) out << (i ? ", " : " ") << lean[i];
    if (lean.size() > 4) out << " and " << lean.size() - 4 << " more";
    out << "\n";
  }
  if (const auto& relay = plan.choice.l2l) {
    out << "  l2l (relay)      " << (relay->whole_model() ? std::string("the whole model")
                                                          : "from block " + std::to_string(relay->from_block) +
                                                                " on (the layers before it kept on the device)")
        << ", boundaries on the " << (relay->boundaries_on_host ? "host" : "device") << "\n";
  }
  out << "  predicted peak   " << core::format_bytes(plan.predicted.peak_bytes) << " of " << core::format_bytes(allowed)
      << " allowed, at " << plan.peak_at << "\n";
  out << "  predicted speed  " << seconds(plan.predicted.step_seconds) << " s/step, "
      << rate(plan.predicted.samples_per_second) << " samples/s";
  // Whose times they are: a step runs at the threads it was profiled with (execute uses them).
  if (plan.threads > 0) out << " at " << plan.threads << " thread" << (plan.threads == 1 ? "" : "s");
  if (plan.calibration) out << ", as " << plan.calibration->device << " runs it";
  out << "\n  why              " << plan.binding_constraint << "\n";
  for (const auto& w : plan.warnings) out << "  warning          " << w << "\n";
  if (!plan.runner_ups.empty()) {
    out << "\nrunner-ups:\n";
    TextTable table({{"micro-batch"}, {"checkpointed"}, {"peak"}, {"s/step"}, {"samples/s"}});
    for (const auto& r : plan.runner_ups) {
      table.add_row({std::to_string(r.micro_batch), std::to_string(r.checkpointed_blocks),
                     core::format_bytes(r.predicted.peak_bytes), seconds(r.predicted.step_seconds),
                     rate(r.predicted.samples_per_second)});
    }
    out << table.render();
  }
  return out.str();
}

}  // namespace headroom::report
