#include "report/execution_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/statistics.h"
#include "core/sharding.h"
#include "core/units.h"
#include "report/text_table.h"

namespace headroom::report {

namespace {

std::string percent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%+.1f%%", 100 * fraction);
  return buffer;
}

std::string fixed(double v, const char* format) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, format, v);
  return buffer;
}

}  // namespace

std::string describe_out_of_memory(const core::OutOfMemory& o) {
  std::ostringstream out;
  out << "out of memory under the " << core::format_bytes(o.budget_bytes) << " budget";
  if (!o.phase.empty()) out << " in " << o.phase;
  if (!o.layer.empty()) out << " of " << o.layer;
  if (o.micro_batch >= 0) out << " (micro-batch " << o.micro_batch << ")";
  out << ": " << core::format_bytes(o.requested_bytes) << " requested with " << core::format_bytes(o.in_use_bytes)
      << " in use";
  return out.str();
}

namespace {

void write_headline(std::ostream& out, const core::Report& r) {
  out << r.model << " on " << r.device_name << ": global batch " << r.global_batch << " as " << r.micro_batches.size()
      << " micro-batch" << (r.micro_batches.size() > 1 ? "es" : "") << ", " << r.checkpointed_blocks.size()
      << " checkpointed block" << (r.checkpointed_blocks.size() == 1 ? "" : "s")
      << (r.precision != core::Precision::Fp32 ? ", in " + std::string(core::precision_name(r.precision)) : std::string())
      << ", budget "
      << (r.budget_bytes > 0 ? core::format_bytes(r.budget_bytes) + " enforced" : std::string("not enforced")) << "\n\n";
}

void write_predicted_against_measured(std::ostream& out, const core::Report& r) {
  TextTable table({{"", TextTable::Align::Left}, {"predicted"}, {"measured"}, {"error"}});
  table.add_row({"peak memory", core::format_bytes(r.predicted.peak_bytes), core::format_bytes(r.measured.peak_bytes),
                 percent(r.peak_rel_error)});
  table.add_row({"step time (s)", fixed(r.predicted.step_seconds, "%.4f"), fixed(r.measured.step_seconds, "%.4f"),
                 percent(core::relative_error(r.predicted.step_seconds, r.measured.step_seconds))});
  table.add_row({"samples/s", fixed(r.predicted.samples_per_second, "%.2f"), fixed(r.measured.samples_per_second, "%.2f"),
                 percent(r.throughput_rel_error)});
  out << table.render();
}

// How the measured figures were taken: the steps and their spread, the threads, the budget kept.
void write_measurement(std::ostream& out, const core::Report& r) {
  out << "\nmedian of " << r.steps << " measured steps";
  if (r.step_seconds.size() > 1) {
    const auto [lo, hi] = std::minmax_element(r.step_seconds.begin(), r.step_seconds.end());
    out << " (" << fixed(*lo, "%.4f") << "-" << fixed(*hi, "%.4f") << " s, spread "
        << fixed(100 * core::relative_spread(r.step_seconds), "%.1f") << "%)";
  }
  if (r.threads > 0) out << " at " << r.threads << " thread" << (r.threads == 1 ? "" : "s");
  if (r.budget_bytes > 0) out << "; measured peak " << (r.measured.peak_bytes <= r.budget_bytes ? "within" : "OVER") << " the budget";
}

// Next to the peak libtorch was handed: what the host held for it, the CPU's reserved bytes.
void write_host_memory(std::ostream& out, const core::HostMemoryReport& h) {
  out << "\nhost memory: malloc's heap " << core::format_bytes(h.heap_peak_bytes) << " resident at most ("
      << core::format_bytes(h.heap_start_bytes) << " before the model), " << core::format_bytes(h.heap_free_bytes)
      << " of it free; process " << core::format_bytes(h.resident_peak_bytes) << " (" << core::format_bytes(h.resident_start_bytes)
      << " before)";
  if (h.trims > 0) out << "; free heap handed back " << h.trims << " time(s) to keep within the budget";
}

void write_calibrations(std::ostream& out, const core::Report& r) {
  const auto speeds = [](const core::Calibration& c) {
    return fixed(c.compute() / 1e9, "%.1f") + " GFLOP/s, " + fixed(c.memory() / 1e9, "%.1f") + " GB/s";
  };
  out << "\nmachine (calibration, compute and memory): " << speeds(*r.calibration_before) << " before the run, "
      << speeds(*r.calibration_after) << " after";
  if (r.predicted_calibration) out << "; the predicted times' machine " << speeds(*r.predicted_calibration);
}

void write_gradient_check(std::ostream& out, const core::Report& r) {
  out << "\ngradient check: ";
  if (!r.gradient_check.computed) {
    out << r.gradient_check.note << "\n";
    return;
  }
  out << "max relative difference " << fixed(r.gradient_check.max_rel_diff, "%.2e") << " (" << r.gradient_check.note << ")\n";
  if (r.gradient_check.float32_max_rel_diff) {
    const std::string precision(core::precision_name(r.precision));
    out << "  against the full batch in float32 (same weights): the plan's gradients "
        << fixed(*r.gradient_check.float32_max_rel_diff, "%.2e") << ", the full batch's in " << precision << " "
        << fixed(*r.gradient_check.reference_float32_max_rel_diff, "%.2e") << " (what " << precision << " itself costs)\n";
  }
}

void write_workers(std::ostream& out, const core::DataParallelReport& d, std::int64_t predicted_peak_bytes) {
  TextTable workers(
      {{"worker"}, {"CPUs"}, {"samples"}, {"peak memory"}, {"peak error"}, {"step time (s)"}, {"all-reduce wait (s)"}});
  for (const auto& w : d.workers) {
    workers.add_row({std::to_string(w.rank), w.cpus > 0 ? std::to_string(w.cpus) : "-", std::to_string(w.samples),
                     core::format_bytes(w.peak_bytes),
                     percent(core::relative_error(static_cast<double>(predicted_peak_bytes), static_cast<double>(w.peak_bytes))),
                     fixed(w.step_seconds, "%.4f"), fixed(w.allreduce_wait_seconds, "%.4f")});
  }
  out << workers.render();
  if (d.shard_stage >= 2) return;  // nothing is all-reduced
  out << "predicted all-reduce " << fixed(d.predicted_allreduce_seconds, "%.4f") << " s per step, "
      << fixed(d.predicted_exposed_allreduce_seconds, "%.4f") << " s of it after the last backward (the wait)\n";
}

void write_data_parallel(std::ostream& out, const core::DataParallelReport& d, std::int64_t predicted_peak_bytes) {
  out << "data parallel: " << d.world_size << " workers (c10d " << d.backend << "), ";
  if (d.shard_stage >= 2) {
    out << "gradients reduced to their owners as backward fills a buffer";
  } else {
    out << "gradients in " << d.buckets << " bucket(s) of " << core::format_bytes(d.bucket_bytes) << " in all";
  }
  out << "; weights identical on every worker, bit for bit, after each of " << d.weight_checks << " steps\n";
  if (!d.workers.empty()) write_workers(out, d, predicted_peak_bytes);
  if (d.shard_stage >= 3) {
    out << core::shard_stage_name(d.shard_stage) << ": waits per step in the parameter gathers "
        << fixed(d.gather_seconds, "%.4f") << " s (predicted " << fixed(d.predicted_gather_seconds, "%.4f") << ")";
  } else if (d.shard_stage > 0) {
    out << core::shard_stage_name(d.shard_stage) << ": the parameters' broadcast "
        << fixed(d.broadcast_seconds, "%.4f") << " s per step (predicted " << fixed(d.predicted_broadcast_seconds, "%.4f") << ")";
  }
  if (d.shard_stage > 0) {
    if (d.shard_stage >= 2) {
      out << (d.shard_stage >= 3 ? ", for" : ", waits for") << " the gradients' reduces "
          << fixed(d.gradient_reduce_seconds, "%.4f") << " s (predicted " << fixed(d.predicted_gradient_reduce_seconds, "%.4f") << ")";
    }
    out << "\n";
  }
  if (d.full_batch_weights_max_rel_diff) {
    out << "weights after the run's steps against one process stepping on each step's full batch: max relative difference "
        << fixed(*d.full_batch_weights_max_rel_diff, "%.2e") << "\n";
  }
}

// L2L's lanes, a step each: where the time went against where the plan put it.
void write_l2l_lanes(std::ostream& out, const core::L2LReport& l) {
  TextTable lanes({{"L2L lane (s/step)", TextTable::Align::Left}, {"predicted"}, {"measured"}});
  const auto cell = [](double v) { return v >= 0 ? fixed(v, "%.4f") : std::string("-"); };
  lanes.add_row({"compute", cell(l.predicted.compute_seconds), cell(l.measured.compute_seconds)});
  lanes.add_row({"copies", cell(l.predicted.copy_seconds), cell(l.measured.copy_seconds)});
  lanes.add_row({"compute waiting", cell(l.predicted.wait_seconds), cell(l.measured.wait_seconds)});
  lanes.add_row({"host optimizer", cell(l.predicted.host_optimizer_seconds), cell(l.measured.host_optimizer_seconds)});
  out << lanes.render();
}

void write_l2l(std::ostream& out, const core::L2LReport& l) {
  out << "L2L: " << l.stages << " stages";
  if (l.kept_stages == 1) out << ", the first kept on the device";
  if (l.kept_stages > 1) out << ", the first " << l.kept_stages << " kept on the device";
  out << " (the largest offloaded " << core::format_bytes(l.largest_stage_parameter_bytes)
      << " of parameters), boundaries on the " << (l.boundaries_on_host ? "host" : "device") << "; the peak above is the device side's; host side: "
      << core::format_bytes(l.measured_host_peak_bytes) << " at most (parameters, optimizer state, RNG states"
      << (l.boundaries_on_host ? ", stashed boundaries and their gradients" : "")
      << ", and a stage's gradients with its optimizer step's temporaries), predicted "
      << core::format_bytes(l.predicted_host_bytes) << "\n";
  if (l.measured.compute_seconds >= 0) write_l2l_lanes(out, l);
}

}  // namespace

std::string render_report(const core::Report& r) {
  std::ostringstream out;
  write_headline(out, r);
  if (r.status == "out_of_memory" && r.out_of_memory) {
    out << describe_out_of_memory(*r.out_of_memory) << "\n";
    return out.str();
  }
  write_predicted_against_measured(out, r);
  write_measurement(out, r);
  if (r.host_memory) write_host_memory(out, *r.host_memory);
  if (!r.host_memory_regime.empty()) out << "\nhost-memory regime: " << r.host_memory_regime;
  if (r.calibration_before && r.calibration_after) write_calibrations(out, r);
  write_gradient_check(out, r);
  if (r.data_parallel) write_data_parallel(out, *r.data_parallel, r.predicted.peak_bytes);
  if (r.l2l) write_l2l(out, *r.l2l);
  if (r.test_accuracy) out << "test accuracy on " << r.data << " after training: " << fixed(100 * *r.test_accuracy, "%.1f") << "%\n";
  for (const auto& w : r.warnings) out << "warning: " << w << "\n";
  return out.str();
}

}  // namespace headroom::report
