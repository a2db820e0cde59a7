#include "core/report.h"

#include <cstdint>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/json_reader.h"
#include "core/sharding.h"
#include "core/precision_json.h"

namespace headroom::core {

namespace {

nlohmann::json gradient_check_to_json(const GradientCheck& check) {
  nlohmann::json out = {{"computed", check.computed}, {"note", check.note}};
  if (check.computed) out["max_rel_diff"] = check.max_rel_diff;
  if (check.float32_max_rel_diff) {
    out["float32_max_rel_diff"] = *check.float32_max_rel_diff;
    out["reference_float32_max_rel_diff"] = *check.reference_float32_max_rel_diff;
  }
  return out;
}

// The calibration a run was predicted with, and the one it found before and after it.
nlohmann::json calibrations_to_json(const Report& r) {
  nlohmann::json calibration = nlohmann::json::object();
  if (r.predicted_calibration) calibration["predicted"] = to_json(*r.predicted_calibration);
  if (r.calibration_before) calibration["before"] = to_json(*r.calibration_before);
  if (r.calibration_after) calibration["after"] = to_json(*r.calibration_after);
  return calibration;
}

// The regime alone where the run was not measured on the host.
nlohmann::json host_memory_to_json(const std::string& regime, const std::optional<HostMemoryReport>& host) {
  nlohmann::json out;
  if (!regime.empty()) out = {{"regime", regime}};
  if (host) {
    out["resident_start_bytes"] = host->resident_start_bytes;
    out["resident_peak_bytes"] = host->resident_peak_bytes;
    out["heap_start_bytes"] = host->heap_start_bytes;
    out["heap_peak_bytes"] = host->heap_peak_bytes;
    out["heap_free_bytes"] = host->heap_free_bytes;
    out["trims"] = host->trims;
  }
  return out;
}

nlohmann::json data_parallel_to_json(const DataParallelReport& d) {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& w : d.workers) {
    workers.push_back({{"rank", w.rank},
                       {"samples", w.samples},
                       {"peak_bytes", w.peak_bytes},
                       {"step_seconds", w.step_seconds},
                       {"allreduce_wait_seconds", w.allreduce_wait_seconds},
                       {"cpus", w.cpus}});
  }
  nlohmann::json out = {{"world_size", d.world_size}, {"backend", d.backend},           {"buckets", d.buckets},
                        {"bucket_bytes", d.bucket_bytes}, {"weight_checks", d.weight_checks}, {"workers", workers},
                        {"predicted_allreduce_seconds", d.predicted_allreduce_seconds},
                        {"predicted_exposed_allreduce_seconds", d.predicted_exposed_allreduce_seconds}};
  if (d.full_batch_weights_max_rel_diff) out["full_batch_weights_max_rel_diff"] = *d.full_batch_weights_max_rel_diff;
  if (d.shard_stage > 0) {
    out["shard_stage"] = d.shard_stage;
    out["broadcast_seconds"] = d.broadcast_seconds;
    out["predicted_broadcast_seconds"] = d.predicted_broadcast_seconds;
  }
  if (d.shard_stage >= 2) {
    out["gradient_reduce_seconds"] = d.gradient_reduce_seconds;
    out["predicted_gradient_reduce_seconds"] = d.predicted_gradient_reduce_seconds;
    out["gradient_reduces"] = d.gradient_reduces;
  }
  if (d.shard_stage >= 3) {
    out["gather_seconds"] = d.gather_seconds;
    out["predicted_gather_seconds"] = d.predicted_gather_seconds;
  }
  return out;
}

nlohmann::json lanes_to_json(const L2LReport::Lanes& lanes) {
  return nlohmann::json{{"compute_seconds", lanes.compute_seconds},
                        {"copy_seconds", lanes.copy_seconds},
                        {"wait_seconds", lanes.wait_seconds},
                        {"host_optimizer_seconds", lanes.host_optimizer_seconds}};
}

// Negative lanes were not recorded (L2LReport::Lanes) and are left out.
nlohmann::json l2l_to_json(const L2LReport& l) {
  nlohmann::json out = {{"boundaries", l.boundaries_on_host ? "host" : "device"},
                        {"stages", l.stages},
                        {"largest_stage_parameter_bytes", l.largest_stage_parameter_bytes},
                        {"predicted_host_bytes", l.predicted_host_bytes},
                        {"measured_host_peak_bytes", l.measured_host_peak_bytes}};
  if (l.kept_stages > 0) out["kept_stages"] = l.kept_stages;
  if (l.measured.compute_seconds >= 0) out["measured_lanes"] = lanes_to_json(l.measured);
  if (l.predicted.compute_seconds >= 0) out["predicted_lanes"] = lanes_to_json(l.predicted);
  return out;
}

nlohmann::json out_of_memory_to_json(const OutOfMemory& o) {
  return nlohmann::json{{"layer", o.layer},           {"phase", o.phase},
                        {"micro_batch", o.micro_batch}, {"requested_bytes", o.requested_bytes},
                        {"in_use_bytes", o.in_use_bytes}, {"budget_bytes", o.budget_bytes}};
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
      {"predicted", to_json(r.predicted)},
      {"measured", to_json(r.measured)},
      {"errors", {{"peak_rel", r.peak_rel_error}, {"throughput_rel", r.throughput_rel_error}}},
      {"gradient_check", gradient_check_to_json(r.gradient_check)},
      {"warnings", r.warnings},
      {"step_seconds", r.step_seconds},
      {"data", r.data},
  };
  if (r.threads > 0) doc["threads"] = r.threads;
  if (r.precision != Precision::Fp32) doc["precision"] = std::string(precision_name(r.precision));
  if (r.predicted_calibration || r.calibration_before || r.calibration_after) doc["calibration"] = calibrations_to_json(r);
  if (r.test_accuracy) doc["test_accuracy"] = *r.test_accuracy;
  if (r.device == "cuda") doc["measured"]["reserved_bytes"] = r.measured_reserved_bytes;
  if (!r.host_memory_regime.empty() || r.host_memory) doc["host_memory"] = host_memory_to_json(r.host_memory_regime, r.host_memory);
  if (r.data_parallel) doc["data_parallel"] = data_parallel_to_json(*r.data_parallel);
  if (r.l2l) doc["l2l"] = l2l_to_json(*r.l2l);
  if (r.out_of_memory) doc["out_of_memory"] = out_of_memory_to_json(*r.out_of_memory);
  return doc;
}

namespace {

void read_plan_summary(const JsonNode& root, Report& r) {
  r.plan_path = root.at("plan").as_string();
  r.model = root.at("model").as_string();
  r.device = root.at("device").at("kind").as_string();
  r.device_name = root.at("device").at("name").as_string();
  r.budget_bytes = root.at("budget_bytes").as_non_negative_int();
  r.global_batch = root.at("global_batch").as_non_negative_int();
  for (const auto& m : root.at("micro_batches").elements()) r.micro_batches.push_back(m.as_non_negative_int());
  for (const auto& b : root.at("checkpointed_blocks").elements()) {
    r.checkpointed_blocks.push_back(static_cast<int>(b.as_int_in(0, INT32_MAX)));
  }
}

void read_outcome(const JsonNode& root, Report& r) {
  r.steps = static_cast<int>(root.at("steps").as_int_in(0, INT32_MAX));
  r.status = root.at("status").as_string();
  r.predicted = read_step_figures(root.at("predicted"));
  r.measured = read_step_figures(root.at("measured"));
  if (root.at("measured").has("reserved_bytes")) {
    r.measured_reserved_bytes = root.at("measured").at("reserved_bytes").as_non_negative_int();
  }
  r.peak_rel_error = root.at("errors").at("peak_rel").as_double();
  r.throughput_rel_error = root.at("errors").at("throughput_rel").as_double();
}

GradientCheck read_gradient_check(const JsonNode& check) {
  GradientCheck out;
  out.computed = check.at("computed").as_bool();
  out.note = check.at("note").as_string();
  if (out.computed) out.max_rel_diff = check.at("max_rel_diff").as_double();
  if (check.has("float32_max_rel_diff") || check.has("reference_float32_max_rel_diff")) {
    out.float32_max_rel_diff = check.at("float32_max_rel_diff").as_double();
    out.reference_float32_max_rel_diff = check.at("reference_float32_max_rel_diff").as_double();
  }
  return out;
}

void read_calibrations(const JsonNode& calibration, Report& r) {
  calibration.expect_object();
  if (calibration.has("predicted")) r.predicted_calibration = read_calibration(calibration.at("predicted"));
  if (calibration.has("before")) r.calibration_before = read_calibration(calibration.at("before"));
  if (calibration.has("after")) r.calibration_after = read_calibration(calibration.at("after"));
}

void read_host_memory(const JsonNode& host, Report& r) {
  host.expect_object();
  r.host_memory_regime = host.at("regime").as_string();
  if (host.has("resident_peak_bytes")) {
    HostMemoryReport h;
    h.resident_start_bytes = host.at("resident_start_bytes").as_non_negative_int();
    h.resident_peak_bytes = host.at("resident_peak_bytes").as_non_negative_int();
    h.heap_start_bytes = host.at("heap_start_bytes").as_non_negative_int();
    h.heap_peak_bytes = host.at("heap_peak_bytes").as_non_negative_int();
    h.heap_free_bytes = host.at("heap_free_bytes").as_non_negative_int();
    h.trims = static_cast<int>(host.at("trims").as_int_in(0, INT32_MAX));
    r.host_memory = h;
  }
}

DataParallelReport read_data_parallel(const JsonNode& dp) {
  DataParallelReport d;
  d.world_size = static_cast<int>(dp.at("world_size").as_int_in(1, 4096));
  d.backend = dp.at("backend").as_string();
  d.buckets = dp.at("buckets").as_non_negative_int();
  d.bucket_bytes = dp.at("bucket_bytes").as_non_negative_int();
  d.weight_checks = static_cast<int>(dp.at("weight_checks").as_int_in(0, INT32_MAX));
  if (dp.has("full_batch_weights_max_rel_diff")) {
    d.full_batch_weights_max_rel_diff = dp.at("full_batch_weights_max_rel_diff").as_double();
  }
  d.predicted_allreduce_seconds = dp.at("predicted_allreduce_seconds").as_double();
  d.predicted_exposed_allreduce_seconds = dp.at("predicted_exposed_allreduce_seconds").as_double();
  if (dp.has("shard_stage")) {
    d.shard_stage = static_cast<int>(dp.at("shard_stage").as_int_in(1, kMaxShardStage));
    d.broadcast_seconds = dp.at("broadcast_seconds").as_double();
    d.predicted_broadcast_seconds = dp.at("predicted_broadcast_seconds").as_double();
  }
  if (d.shard_stage >= 2) {
    d.gradient_reduce_seconds = dp.at("gradient_reduce_seconds").as_double();
    d.predicted_gradient_reduce_seconds = dp.at("predicted_gradient_reduce_seconds").as_double();
    if (dp.has("gradient_reduces")) d.gradient_reduces = dp.at("gradient_reduces").as_non_negative_int();
  }
  if (d.shard_stage >= 3) {
    d.gather_seconds = dp.at("gather_seconds").as_double();
    d.predicted_gather_seconds = dp.at("predicted_gather_seconds").as_double();
  }
  for (const auto& w : dp.at("workers").elements()) {
    d.workers.push_back({static_cast<int>(w.at("rank").as_int_in(0, 4095)), w.at("samples").as_non_negative_int(),
                         w.at("peak_bytes").as_non_negative_int(), w.at("step_seconds").as_double(),
                         w.at("allreduce_wait_seconds").as_double(),
                         w.has("cpus") ? static_cast<int>(w.at("cpus").as_int_in(0, 1 << 20)) : 0});
  }
  return d;
}

L2LReport::Lanes read_lanes(const JsonNode& n) {
  n.expect_object();
  const auto seconds = [&](const char* key) {
    const double v = n.at(key).as_double();
    if (!(v >= 0 && v < 1e9)) n.at(key).fail("expected seconds from 0");
    return v;
  };
  return L2LReport::Lanes{seconds("compute_seconds"), seconds("copy_seconds"), seconds("wait_seconds"),
                            seconds("host_optimizer_seconds")};
}

L2LReport read_l2l(const JsonNode& l) {
  L2LReport l2l;
  const std::string where = l.at("boundaries").as_string();
  if (where != "device" && where != "host") l.at("boundaries").fail("expected device or host, got '" + where + "'");
  l2l.boundaries_on_host = where == "host";
  l2l.stages = static_cast<int>(l.at("stages").as_int_in(0, INT32_MAX));
  if (l.has("kept_stages")) l2l.kept_stages = static_cast<int>(l.at("kept_stages").as_int_in(0, l2l.stages));
  l2l.largest_stage_parameter_bytes = l.at("largest_stage_parameter_bytes").as_non_negative_int();
  l2l.predicted_host_bytes = l.at("predicted_host_bytes").as_non_negative_int();
  l2l.measured_host_peak_bytes = l.at("measured_host_peak_bytes").as_non_negative_int();
  if (l.has("measured_lanes")) l2l.measured = read_lanes(l.at("measured_lanes"));
  if (l.has("predicted_lanes")) l2l.predicted = read_lanes(l.at("predicted_lanes"));
  return l2l;
}

OutOfMemory read_out_of_memory(const JsonNode& o) {
  return OutOfMemory{o.at("layer").as_string(), o.at("phase").as_string(),
                     static_cast<int>(o.at("micro_batch").as_int_in(-1, INT32_MAX)), o.at("requested_bytes").as_int(),
                     o.at("in_use_bytes").as_int(), o.at("budget_bytes").as_int()};
}

Report read_report(const JsonNode& root) {
  expect_schema(root, kReportSchema);
  Report r;
  read_plan_summary(root, r);
  read_outcome(root, r);
  r.gradient_check = read_gradient_check(root.at("gradient_check"));
  for (const auto& w : root.at("warnings").elements()) r.warnings.push_back(w.as_string());
  for (const auto& s : root.at("step_seconds").elements()) r.step_seconds.push_back(s.as_double());
  r.data = root.at("data").as_string();
  if (root.has("threads")) r.threads = static_cast<int>(root.at("threads").as_int_in(1, 4096));
  if (root.has("precision")) r.precision = read_precision(root.at("precision"));
  if (root.has("calibration")) read_calibrations(root.at("calibration"), r);
  if (root.has("test_accuracy")) r.test_accuracy = root.at("test_accuracy").as_double();
  if (root.has("host_memory")) read_host_memory(root.at("host_memory"), r);
  if (root.has("data_parallel")) r.data_parallel = read_data_parallel(root.at("data_parallel"));
  if (root.has("l2l")) r.l2l = read_l2l(root.at("l2l"));
  if (root.has("out_of_memory")) r.out_of_memory = read_out_of_memory(root.at("out_of_memory"));
  return r;
}

}  // namespace

Report report_from_json(const nlohmann::json& document, std::string_view source) {
  try {
    return read_report(JsonNode(document, "$"));
  } catch (const InputError& e) {
    throw InputError(std::string(source) + ": " + e.what());
  }
}

Report read_report_file(const std::filesystem::path& path) {
  return report_from_json(parse_json(read_file(path), path.string()), path.string());
}

void write_report_file(const std::filesystem::path& path, const Report& report) {
  write_file_atomically(path, to_json(report).dump(1) + "\n");
}

}  // namespace headroom::core
