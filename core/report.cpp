#include "core/report.h"

#include "core/atomic_file.h"

namespace headroom::core {

namespace {
nlohmann::json measurement_json(const Measurement& m) {
  return {{"peak_bytes", m.peak_bytes}, {"step_seconds", m.step_seconds}, {"samples_per_second", m.samples_per_second}};
}
}  // namespace

nlohmann::json to_json(const Report& r) {
  nlohmann::json doc = {
      {"schema", kReportSchema},
      {"plan", r.plan_path},
      {"model", r.model},
      {"device", {{"kind", r.device}, {"name", r.device_name}}},
      {"budget_bytes", r.budget_bytes},
      {"global_batch", r.global_batch},
      {"micro_batches", r.micro_batches},
      {"checkpointed_blocks", r.checkpointed_blocks},
      {"steps", r.steps},
      {"status", r.status},
      {"predicted", measurement_json(r.predicted)},
      {"measured", measurement_json(r.measured)},
      {"errors", {{"peak_rel", r.peak_rel_error}, {"throughput_rel", r.throughput_rel_error}}},
      {"gradient_check", {{"computed", r.gradient_check.computed}, {"note", r.gradient_check.note}}},
      {"warnings", r.warnings},
      {"step_seconds", r.step_seconds},
      {"data", r.data},
  };
  if (r.test_accuracy) doc["test_accuracy"] = *r.test_accuracy;
  if (r.gradient_check.computed) doc["gradient_check"]["max_rel_diff"] = r.gradient_check.max_rel_diff;
  if (r.device == "cuda") doc["measured"]["reserved_bytes"] = r.measured_reserved_bytes;
  if (r.out_of_memory) {
    const auto& o = *r.out_of_memory;
    doc["out_of_memory"] = {{"layer", o.layer},           {"phase", o.phase},
                            {"micro_batch", o.micro_batch}, {"requested_bytes", o.requested_bytes},
                            {"in_use_bytes", o.in_use_bytes}, {"budget_bytes", o.budget_bytes}};
  }
  return doc;
}

void write_report_file(const std::filesystem::path& path, const Report& report) {
  write_file_atomically(path, to_json(report).dump(1) + "\n");
}

}  // namespace headroom::core
