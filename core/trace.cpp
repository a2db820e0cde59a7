#include "core/trace.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/freeze_patterns.h"
#include "core/json_reader.h"
#include "core/link_json.h"
#include "core/precision_json.h"
#include "core/known_names.h"
#include "core/optimizer_spec.h"
#include "core/collective.h"

namespace headroom::core {

namespace {

std::int64_t copy_ns(std::int64_t bytes, std::int64_t copies, double bytes_per_second, std::int64_t latency_ns) {
  if (bytes_per_second <= 0 || bytes <= 0 || copies <= 0) return 0;
  return transfer_ns(bytes, bytes_per_second, latency_ns, copies);
}

}  // namespace

std::int64_t DeviceInfo::host_to_device_ns(std::int64_t bytes, std::int64_t copies) const {
  return copy_ns(bytes, copies, host_to_device_bytes_per_s, host_to_device_latency_ns);
}

std::int64_t DeviceInfo::device_to_host_ns(std::int64_t bytes, std::int64_t copies) const {
  return copy_ns(bytes, copies, device_to_host_bytes_per_s, device_to_host_latency_ns);
}

const Trace* Trace::in_precision(Precision wanted) const {
  if (precision == wanted) return this;
  for (const auto& other : other_precisions) {
    if (other.precision == wanted) return &other;
  }
  return nullptr;
}

std::vector<Precision> Trace::precisions() const {
  std::vector<Precision> out{precision};
  for (const auto& other : other_precisions) out.push_back(other.precision);
  return out;
}

std::string Trace::precision_list() const {
  std::string out;
  for (const Precision p : precisions()) out += (out.empty() ? "" : ", ") + std::string(precision_name(p));
  return out;
}

std::int64_t Trace::param_bytes() const {
  std::int64_t total = 0;
  for (const auto& layer : layers) total += layer.param_bytes;
  return total;
}

std::int64_t Trace::frozen_param_bytes() const {
  std::int64_t total = 0;
  for (const auto& layer : layers) total += layer.frozen_param_bytes;
  return total;
}

int Trace::batch_index(std::int64_t batch) const {
  const auto it = std::find(batch_sizes.begin(), batch_sizes.end(), batch);
  return it == batch_sizes.end() ? -1 : static_cast<int>(it - batch_sizes.begin());
}

namespace {

// Config values are kept as text; write the ones that are numbers as JSON numbers so scripts can
// read them as such.
nlohmann::json config_value_to_json(const std::string& text) {
  if (!text.empty()) {
    std::size_t used = 0;
    try {
      const long long i = std::stoll(text, &used);
      if (used == text.size()) return i;
      const double d = std::stod(text, &used);
      if (used == text.size()) return d;
    } catch (const std::exception&) {
    }
  }
  return text;
}

std::string config_value_from_json(const JsonNode& node) {
  const auto& v = node.raw();
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  if (v.is_number_float()) return v.dump();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  node.fail("expected a string or number, got " + json_type_name(v));
}

nlohmann::json sample_to_json(const LayerSample& s) {
  nlohmann::json out = {{"batch", s.batch},
                        {"fwd_ns", s.fwd_ns},
                        {"bwd_ns", s.bwd_ns},
                        {"kept_bytes", s.kept_bytes},
                        {"output_bytes", s.output_bytes},
                        {"fwd_transient_bytes", s.fwd_transient_bytes},
                        {"bwd_transient_bytes", s.bwd_transient_bytes},
                        {"fwd_retained_bytes", s.fwd_retained_bytes},
                        {"bwd_retained_bytes", s.bwd_retained_bytes}};
  if (s.bwd_inputs_held_extra_bytes) out["bwd_inputs_held_extra_bytes"] = *s.bwd_inputs_held_extra_bytes;
  if (s.gpu) {
    out["gpu"] = {{"fwd_kernel_ns", s.gpu->fwd_kernel_ns},
                  {"fwd_kernel_span_ns", s.gpu->fwd_kernel_span_ns},
                  {"fwd_kernels", s.gpu->fwd_kernels},
                  {"bwd_kernel_ns", s.gpu->bwd_kernel_ns},
                  {"bwd_kernel_span_ns", s.gpu->bwd_kernel_span_ns},
                  {"bwd_kernels", s.gpu->bwd_kernels},
                  {"fwd_reserved_bytes", s.gpu->fwd_reserved_bytes},
                  {"bwd_reserved_bytes", s.gpu->bwd_reserved_bytes}};
  }
  return out;
}

nlohmann::json step_to_json(const StepSample& s) {
  nlohmann::json out = {{"batch", s.batch},
                        {"step_ns", s.step_ns},
                        {"plain_step_ns", s.plain_step_ns},
                        {"optimizer_ns", s.optimizer_ns},
                        {"optimizer_transient_bytes", s.optimizer_transient_bytes},
                        {"peak_bytes", s.peak_bytes},
                        {"static_bytes", s.static_bytes},
                        {"input_bytes", s.input_bytes}};
  if (s.gpu) {
    out["gpu"] = {{"kernel_ns", s.gpu->kernel_ns},
                  {"unattributed_kernel_ns", s.gpu->unattributed_kernel_ns},
                  {"peak_reserved_bytes", s.gpu->peak_reserved_bytes},
                  {"device_malloc_bytes", s.gpu->device_malloc_bytes}};
  }
  if (s.sequence) {
    out["sequence"] = {{"micro_batch_ns", s.sequence->micro_batch_ns},
                       {"first_micro_batch_ns", s.sequence->first_micro_batch_ns},
                       {"zero_grad_ns", s.sequence->zero_grad_ns}};
    if (s.sequence->timed_sequences > 0) out["sequence"]["timed_sequences"] = s.sequence->timed_sequences;
    if (s.sequence->micro_batch_error > 0) out["sequence"]["micro_batch_error"] = s.sequence->micro_batch_error;
  }
  return out;
}

}  // namespace

namespace {

nlohmann::json model_to_json(const ModelInfo& model) {
  nlohmann::json config = nlohmann::json::object();
  for (const auto& [k, v] : model.config) config[k] = config_value_to_json(v);
  nlohmann::json out = {{"name", model.name}, {"config", std::move(config)}};
  if (model.file) out["file"] = {{"path", model.file->path}, {"sha256", model.file->sha256}};
  if (!model.freeze.empty()) out["freeze"] = model.freeze;
  if (!model.capture.empty()) out["capture"] = model.capture;
  return out;
}

nlohmann::json samples_to_json(const std::vector<LayerSample>& samples) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : samples) out.push_back(sample_to_json(s));
  return out;
}

nlohmann::json layer_to_json(const LayerProfile& layer) {
  nlohmann::json out = {{"id", layer.id},
                        {"name", layer.name},
                        {"kind", layer.kind},
                        {"block", layer.block},
                        {"inputs", layer.inputs},
                        {"saves_inputs", layer.saves_inputs},
                        {"param_bytes", layer.param_bytes},
                        {"samples", samples_to_json(layer.samples)}};
  if (layer.frozen_param_bytes > 0) out["frozen_param_bytes"] = layer.frozen_param_bytes;
  if (layer.tempo) {
    out["tempo"] = {{"saves_inputs", layer.tempo->saves_inputs},
                    {"keeps_output", layer.tempo->keeps_output},
                    {"samples", samples_to_json(layer.tempo->samples)}};
  }
  if (!layer.checkpointed.empty()) {
    nlohmann::json checkpointed = nlohmann::json::array();
    for (const auto& c : layer.checkpointed) {
      checkpointed.push_back({{"batch", c.batch},
                              {"recompute_transient_bytes", c.recompute_transient_bytes},
                              {"recompute_extra_bytes", c.recompute_extra_bytes},
                              {"bwd_transient_bytes", c.bwd_transient_bytes}});
    }
    out["checkpointed"] = std::move(checkpointed);
    out["keeps_output"] = layer.keeps_output;
  }
  return out;
}

nlohmann::json steps_to_json(const std::vector<StepSample>& steps) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : steps) out.push_back(step_to_json(s));
  return out;
}

nlohmann::json device_to_json(const DeviceInfo& device) {
  nlohmann::json out = {{"kind", device.kind}, {"name", device.name}, {"total_memory_bytes", device.total_memory_bytes}};
  if (device.is_cuda()) out["sm_count"] = device.sm_count;
  // CUDA: pinned host<->device copies; the CPU (traces since L2L's copy lanes): memcpy.
  if (device.is_cuda() || device.host_to_device_bytes_per_s > 0) {
    out["host_to_device_bytes_per_s"] = device.host_to_device_bytes_per_s;
    out["device_to_host_bytes_per_s"] = device.device_to_host_bytes_per_s;
    out["host_to_device_latency_ns"] = device.host_to_device_latency_ns;
    out["device_to_host_latency_ns"] = device.device_to_host_latency_ns;
  }
  return out;
}

}  // namespace

std::int64_t OptimizerInfo::step_count_bytes(const std::string& optimizer) const {
  return parse_optimizer_spec(optimizer).kind == OptimizerSpec::Kind::Sgd ? 0 : 4 * torch_optim_tensors;
}

namespace {

nlohmann::json optimizer_to_json(const OptimizerInfo& optimizer) {
  nlohmann::json out = {{"name", optimizer.name},
                        {"state_bytes", optimizer.state_bytes},
                        {"state_bytes_per_param", optimizer.state_bytes_per_param}};
  if (optimizer.host_ns_per_param > 0) out["host_ns_per_param"] = optimizer.host_ns_per_param;
  if (optimizer.torch_optim_tensors > 0) out["torch_optim_tensors"] = optimizer.torch_optim_tensors;
  if (optimizer.largest_param_elements > 0) out["largest_param_elements"] = optimizer.largest_param_elements;
  if (optimizer.param_tensors > 0) out["param_tensors"] = optimizer.param_tensors;
  return out;
}

nlohmann::json profile_settings_to_json(const ProfileSettings& profile) {
  nlohmann::json out = {{"warmup_steps", profile.warmup_steps},
                        {"repeats", profile.repeats},
                        {"seed", profile.seed},
                        {"threads", profile.threads},
                        {"recorded_at", profile.recorded_at}};
  if (profile.timing_seconds) out["timing_seconds"] = *profile.timing_seconds;
  return out;
}

// The fields older traces lack, written only where set so that such a trace reads back as it was.
void write_optional_sections(const Trace& trace, nlohmann::json& document) {
  if (!trace.host_memory_regime.empty()) document["host_memory"] = {{"regime", trace.host_memory_regime}};
  if (trace.precision != Precision::Fp32) document["precision"] = std::string(precision_name(trace.precision));
  document["checkpoint_state_bytes"] = trace.checkpoint_state_bytes;
  document["model_extra_bytes"] = trace.model_extra_bytes;
  if (trace.workspace_bytes > 0) document["workspace_bytes"] = trace.workspace_bytes;
  if (trace.link) {
    document["link"] = to_json(*trace.link);
  }
  if (trace.has_tempo()) document["tempo_steps"] = steps_to_json(trace.tempo_steps);
  if (trace.contrastive_loss) document["contrastive_loss"] = to_json(*trace.contrastive_loss);
  if (trace.calibration) document["calibration"] = to_json(*trace.calibration);
  if (!trace.other_precisions.empty()) {
    nlohmann::json others = nlohmann::json::array();
    for (const auto& other : trace.other_precisions) others.push_back(to_json(other));
    document["other_precisions"] = std::move(others);
  }
}

}  // namespace

nlohmann::json to_json(const Trace& trace) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& layer : trace.layers) layers.push_back(layer_to_json(layer));
  nlohmann::json document = {
      {"schema", kTraceSchema},
      {"model", model_to_json(trace.model)},
      {"device", device_to_json(trace.device)},
      {"framework", trace.framework},
      {"optimizer", optimizer_to_json(trace.optimizer)},
      {"profile", profile_settings_to_json(trace.profile)},
      {"batch_sizes", trace.batch_sizes},
      {"layers", std::move(layers)},
      {"steps", steps_to_json(trace.steps)},
  };
  write_optional_sections(trace, document);
  return document;
}

namespace {

int as_count(const JsonNode& node, std::int64_t max = 1 << 30) {
  const std::int64_t v = node.as_non_negative_int();
  if (v > max) node.fail("value " + std::to_string(v) + " is out of range");
  return static_cast<int>(v);
}

// A byte count (kMaxTraceBytes), a duration (kMaxTraceNs), a signed change of allocated bytes.
std::int64_t as_bytes(const JsonNode& node) {
  const std::int64_t v = node.as_non_negative_int();
  if (v > kMaxTraceBytes) node.fail("expected at most " + std::to_string(kMaxTraceBytes) + " bytes (16 TiB), got " + std::to_string(v));
  return v;
}

std::int64_t as_ns(const JsonNode& node) {
  const std::int64_t v = node.as_non_negative_int();
  if (v > kMaxTraceNs) node.fail("expected at most " + std::to_string(kMaxTraceNs) + " ns, got " + std::to_string(v));
  return v;
}

std::int64_t as_signed_bytes(const JsonNode& node) {
  return node.as_int_in(-kMaxTraceBytes, kMaxTraceBytes);
}

// A batch size: positive, at most kMaxTraceBatch.
std::int64_t as_batch(const JsonNode& node) {
  const std::int64_t v = node.as_non_negative_int();
  if (v == 0) node.fail("expected a positive batch size, got 0");
  if (v > kMaxTraceBatch) node.fail("expected a batch size of at most " + std::to_string(kMaxTraceBatch) + ", got " + std::to_string(v));
  return v;
}

// CUDA traces carry GPU fields on every sample and step; CPU traces carry none.
void expect_gpu_presence(const JsonNode& node, bool cuda) {
  if (cuda && !node.has("gpu")) node.fail("missing \"gpu\" (a CUDA trace has GPU measurements everywhere)");
  if (!cuda && node.has("gpu")) node.at("gpu").fail("unexpected in a CPU trace");
}

GpuLayerCost read_gpu_layer_cost(const JsonNode& node) {
  node.expect_object();
  GpuLayerCost g;
  g.fwd_kernel_ns = as_ns(node.at("fwd_kernel_ns"));
  g.fwd_kernel_span_ns = as_ns(node.at("fwd_kernel_span_ns"));
  g.fwd_kernels = as_count(node.at("fwd_kernels"));
  g.bwd_kernel_ns = as_ns(node.at("bwd_kernel_ns"));
  g.bwd_kernel_span_ns = as_ns(node.at("bwd_kernel_span_ns"));
  g.bwd_kernels = as_count(node.at("bwd_kernels"));
  g.fwd_reserved_bytes = as_bytes(node.at("fwd_reserved_bytes"));
  g.bwd_reserved_bytes = as_bytes(node.at("bwd_reserved_bytes"));
  return g;
}

LayerSample read_sample(const JsonNode& node, bool cuda) {
  node.expect_object();
  LayerSample s;
  s.batch = as_batch(node.at("batch"));
  s.fwd_ns = as_ns(node.at("fwd_ns"));
  s.bwd_ns = as_ns(node.at("bwd_ns"));
  s.kept_bytes = as_bytes(node.at("kept_bytes"));
  s.output_bytes = as_bytes(node.at("output_bytes"));
  s.fwd_transient_bytes = as_bytes(node.at("fwd_transient_bytes"));
  s.bwd_transient_bytes = as_bytes(node.at("bwd_transient_bytes"));
  s.fwd_retained_bytes = as_signed_bytes(node.at("fwd_retained_bytes"));
  s.bwd_retained_bytes = as_signed_bytes(node.at("bwd_retained_bytes"));
  if (node.has("bwd_inputs_held_extra_bytes")) s.bwd_inputs_held_extra_bytes = as_bytes(node.at("bwd_inputs_held_extra_bytes"));
  expect_gpu_presence(node, cuda);
  if (cuda) s.gpu = read_gpu_layer_cost(node.at("gpu"));
  return s;
}

StepSample read_step(const JsonNode& node, bool cuda) {
  node.expect_object();
  StepSample s;
  s.batch = as_batch(node.at("batch"));
  s.step_ns = as_ns(node.at("step_ns"));
  s.plain_step_ns = as_ns(node.at("plain_step_ns"));
  s.optimizer_ns = as_ns(node.at("optimizer_ns"));
  s.optimizer_transient_bytes = as_bytes(node.at("optimizer_transient_bytes"));
  s.peak_bytes = as_bytes(node.at("peak_bytes"));
  s.static_bytes = as_bytes(node.at("static_bytes"));
  s.input_bytes = as_bytes(node.at("input_bytes"));
  expect_gpu_presence(node, cuda);
  if (cuda) {
    const auto gpu = node.at("gpu");
    gpu.expect_object();
    s.gpu = GpuStepCost{as_ns(gpu.at("kernel_ns")), as_ns(gpu.at("unattributed_kernel_ns")),
                        as_bytes(gpu.at("peak_reserved_bytes")), as_bytes(gpu.at("device_malloc_bytes"))};
  }
  if (node.has("sequence")) {
    const auto sequence = node.at("sequence");
    sequence.expect_object();
    s.sequence = StepSequence{as_ns(sequence.at("micro_batch_ns")), as_ns(sequence.at("first_micro_batch_ns")),
                              as_ns(sequence.at("zero_grad_ns"))};
    if (sequence.has("timed_sequences")) s.sequence->timed_sequences = as_count(sequence.at("timed_sequences"));
    if (sequence.has("micro_batch_error")) {
      s.sequence->micro_batch_error = sequence.at("micro_batch_error").as_double();
      if (!(s.sequence->micro_batch_error >= 0 && s.sequence->micro_batch_error <= 1)) {
        sequence.at("micro_batch_error").fail("expected a relative error from 0 to 1");
      }
    }
  }
  return s;
}

// One sample per batch size, in batch_sizes order.
std::vector<LayerSample> read_samples(const JsonNode& samples, const std::vector<std::int64_t>& batches, bool cuda) {
  std::vector<LayerSample> out;
  for (const auto& sample : samples.elements()) out.push_back(read_sample(sample, cuda));
  if (out.size() != batches.size()) {
    samples.fail("expected one sample per batch size (" + std::to_string(batches.size()) + "), got " +
                 std::to_string(out.size()));
  }
  for (std::size_t i = 0; i < batches.size(); ++i) {
    if (out[i].batch != batches[i]) {
      samples.elements()[i].at("batch").fail("expected " + std::to_string(batches[i]) + " (batch_sizes order), got " +
                                             std::to_string(out[i].batch));
    }
  }
  return out;
}

// `zoo`: a zoo model's trace, whose layer kinds are the zoo's (a TorchScript module's are its classes').
LayerProfile read_layer(const JsonNode& node, int expected_id, const std::vector<std::int64_t>& batches, bool cuda,
                        bool zoo) {
  node.expect_object();
  LayerProfile layer;
  // Compared as read: an id past int's range must not wrap to the expected one.
  const std::int64_t id = node.at("id").as_int();
  if (id != expected_id) {
    node.at("id").fail("expected " + std::to_string(expected_id) + " (ids are the layer's position), got " +
                       std::to_string(id));
  }
  layer.id = expected_id;
  layer.name = node.at("name").as_string();
  if (layer.name.empty()) node.at("name").fail("expected a non-empty name");
  layer.kind = node.at("kind").as_string();
  if (layer.kind.empty()) node.at("kind").fail("expected a non-empty kind");
  if (zoo && !is_known(kZooLayerKinds, layer.kind)) {
    node.at("kind").fail("unknown layer kind '" + layer.kind + "' for a zoo model (known: " + name_list(kZooLayerKinds) +
                         "; a module's own trace, with \"model.file\" or \"model.capture\", may have any)");
  }
  const auto block = node.at("block");
  const std::int64_t block_index = block.as_int();
  if (block_index < -1 || block_index >= kMaxTraceLayers) {
    block.fail("expected -1 (no block) or a block index below " + std::to_string(kMaxTraceLayers));
  }
  layer.block = static_cast<int>(block_index);
  for (const auto& input : node.at("inputs").elements()) {
    const std::int64_t id = input.as_int();
    const bool model_input = id < 0 && id >= -1 - kMaxModelInputs && is_model_input(static_cast<int>(id));
    if (!model_input && id != kTargetInput && (id < 0 || id >= expected_id)) {
      input.fail("input " + std::to_string(id) + " is not an earlier layer, -1 (model input), -2 (target) or -3 to " +
                 std::to_string(-1 - kMaxModelInputs) + " (the model's further inputs)");
    }
    layer.inputs.push_back(static_cast<int>(id));
  }
  for (const auto& saved : node.at("saves_inputs").elements()) layer.saves_inputs.push_back(saved.as_bool());
  if (layer.saves_inputs.size() != layer.inputs.size()) {
    node.at("saves_inputs").fail("expected one entry per input (" + std::to_string(layer.inputs.size()) + "), got " +
                                 std::to_string(layer.saves_inputs.size()));
  }
  layer.param_bytes = as_bytes(node.at("param_bytes"));
  if (node.has("frozen_param_bytes")) layer.frozen_param_bytes = node.at("frozen_param_bytes").as_int_in(0, layer.param_bytes);
  layer.samples = read_samples(node.at("samples"), batches, cuda);
  if (node.has("tempo")) {
    const auto tempo = node.at("tempo");
    tempo.expect_object();
    TempoProfile profile;
    for (const auto& saved : tempo.at("saves_inputs").elements()) profile.saves_inputs.push_back(saved.as_bool());
    if (profile.saves_inputs.size() != layer.inputs.size()) {
      tempo.at("saves_inputs").fail("expected one entry per input (" + std::to_string(layer.inputs.size()) + "), got " +
                                    std::to_string(profile.saves_inputs.size()));
    }
    profile.keeps_output = tempo.at("keeps_output").as_bool();
    profile.samples = read_samples(tempo.at("samples"), batches, cuda);
    layer.tempo = std::move(profile);
  }
  if (node.has("checkpointed")) {
    const auto checkpointed = node.at("checkpointed");
    for (const auto& c : checkpointed.elements()) {
      c.expect_object();
      layer.checkpointed.push_back({c.at("batch").as_int(), as_bytes(c.at("recompute_transient_bytes")),
                                    as_bytes(c.at("recompute_extra_bytes")), as_bytes(c.at("bwd_transient_bytes"))});
    }
    if (layer.checkpointed.size() != batches.size()) {
      checkpointed.fail("expected one entry per batch size (" + std::to_string(batches.size()) + "), got " +
                        std::to_string(layer.checkpointed.size()));
    }
    for (std::size_t i = 0; i < batches.size(); ++i) {
      if (layer.checkpointed[i].batch != batches[i]) {
        checkpointed.elements()[i].at("batch").fail("expected " + std::to_string(batches[i]) + " (batch_sizes order)");
      }
    }
    layer.keeps_output = node.at("keeps_output").as_bool();
  }
  return layer;
}

// One step per batch size, in batch_sizes order.
std::vector<StepSample> read_steps(const JsonNode& steps, const std::vector<std::int64_t>& batches, bool cuda) {
  std::vector<StepSample> out;
  for (const auto& step : steps.elements()) out.push_back(read_step(step, cuda));
  if (out.size() != batches.size()) {
    steps.fail("expected one step per batch size (" + std::to_string(batches.size()) + "), got " +
               std::to_string(out.size()));
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].batch != batches[i]) {
      steps.elements()[i].at("batch").fail("expected " + std::to_string(batches[i]) + " (batch_sizes order)");
    }
    // The cost model reads sequences for every batch size or for none.
    if (out[i].sequence.has_value() != out.front().sequence.has_value()) {
      steps.elements()[i].fail(out.front().sequence ? "missing \"sequence\" (the first step has one)"
                                                    : "unexpected \"sequence\" (the first step has none)");
    }
  }
  return out;
}

}  // namespace

namespace {

ModelInfo read_model(const JsonNode& model) {
  ModelInfo info;
  info.name = model.at("name").as_string();
  if (info.name.empty()) model.at("name").fail("expected a non-empty model name");
  const auto config = model.at("config");
  config.expect_object();
  for (const auto& [key, value] : config.raw().items()) {
    info.config[key] = config_value_from_json(JsonNode(value, config.path() + "." + key));
  }
  if (model.has("file")) {
    const auto file = model.at("file");
    ModelFile f{file.at("path").as_string(), file.at("sha256").as_string()};
    if (f.path.empty() || f.path.size() > 4096) file.at("path").fail("expected a file path of 1 to 4096 characters");
    const bool hex = f.sha256.size() == 64 && f.sha256.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!hex) file.at("sha256").fail("expected 64 lower-case hex digits");
    info.file = std::move(f);
  }
  if (model.has("capture")) {
    info.capture = model.at("capture").as_string();
    if (info.capture != "eager" && info.capture != "script" && info.capture != "trace") {
      model.at("capture").fail("expected script, trace or eager (absent for the zoo's models and TorchScript files)");
    }
    if (info.capture == "eager" && info.file) model.at("capture").fail("an eager capture has no TorchScript file");
    if (info.capture != "eager" && !info.file) model.at("capture").fail("a " + info.capture + " capture has its TorchScript file");
  }
  if (model.has("freeze")) {
    for (const auto& pattern : model.at("freeze").elements()) {
      info.freeze.push_back(pattern.as_string());
      // One pattern as --freeze takes it: not empty, no comma.
      bool one_pattern = false;
      try {
        one_pattern = parse_freeze_patterns(info.freeze.back()).size() == 1;
      } catch (const InputError&) {
      }
      if (!one_pattern) pattern.fail("expected a pattern such as layer4 or !fc");
    }
  }
  return info;
}

// The host<->device copy figures: CUDA's pinned copies, or a CPU's memcpy.
void read_copy_rates(const JsonNode& device, DeviceInfo& info) {
  info.host_to_device_bytes_per_s = device.at("host_to_device_bytes_per_s").as_double();
  info.device_to_host_bytes_per_s = device.at("device_to_host_bytes_per_s").as_double();
  for (const char* key : {"host_to_device_bytes_per_s", "device_to_host_bytes_per_s"}) {
    const double v = device.at(key).as_double();
    if (!(v > 0 && v <= 1e14)) device.at(key).fail("expected a positive bandwidth, at most 1e14 bytes/s");
  }
  // Traces from before the latency was measured have none: their copies are timed by bandwidth alone.
  if (device.has("host_to_device_latency_ns")) {
    info.host_to_device_latency_ns = device.at("host_to_device_latency_ns").as_int_in(0, 10'000'000'000);
  }
  if (device.has("device_to_host_latency_ns")) {
    info.device_to_host_latency_ns = device.at("device_to_host_latency_ns").as_int_in(0, 10'000'000'000);
  }
}

DeviceInfo read_device(const JsonNode& device) {
  DeviceInfo info;
  info.kind = device.at("kind").as_string();
  if (info.kind != "cpu" && info.kind != "cuda") {
    device.at("kind").fail("expected \"cpu\" or \"cuda\", got \"" + info.kind + "\"");
  }
  info.name = device.at("name").as_string();
  info.total_memory_bytes = as_bytes(device.at("total_memory_bytes"));
  if (info.is_cuda()) info.sm_count = as_count(device.at("sm_count"));
  // A CPU trace from before the memcpy bandwidth was measured has none (0: copies not timed).
  if (info.is_cuda() || device.has("host_to_device_bytes_per_s") || device.has("device_to_host_bytes_per_s")) {
    read_copy_rates(device, info);
  }
  return info;
}

std::map<std::string, std::string> read_framework(const JsonNode& framework) {
  framework.expect_object();
  std::map<std::string, std::string> versions;
  for (const auto& [key, value] : framework.raw().items()) {
    versions[key] = JsonNode(value, framework.path() + "." + key).as_string();
  }
  // What recorded the trace, shown with it.
  for (const char* key : {"headroom", "torch"}) framework.at(key).as_string();
  return versions;
}

// The optional top-level fields read between the framework and the optimizer: the host memory
// regime, the precision, the extras the static memory counts, the workers' link, a calibration.
void read_optional_sections(const JsonNode& root, Trace& trace) {
  if (root.has("host_memory")) {
    const auto host = root.at("host_memory");
    host.expect_object();
    trace.host_memory_regime = host.at("regime").as_string();
    if (trace.host_memory_regime.empty()) host.at("regime").fail("expected a non-empty regime");
  }
  if (root.has("precision")) trace.precision = read_precision(root.at("precision"));
  if (root.has("checkpoint_state_bytes")) {
    // An RNG state: kilobytes (a CPU generator's is 5 KiB).
    trace.checkpoint_state_bytes = root.at("checkpoint_state_bytes").as_int_in(0, std::int64_t{1} << 24);
  }
  if (root.has("model_extra_bytes")) trace.model_extra_bytes = as_bytes(root.at("model_extra_bytes"));
  if (root.has("workspace_bytes")) trace.workspace_bytes = as_bytes(root.at("workspace_bytes"));
  if (root.has("link")) trace.link = read_link(root.at("link"));
  trace.extras_recorded = root.has("model_extra_bytes") && root.has("checkpoint_state_bytes");
  if (root.has("calibration")) trace.calibration = read_calibration(root.at("calibration"));
}

OptimizerInfo read_optimizer(const JsonNode& optimizer) {
  OptimizerInfo info;
  info.name = optimizer.at("name").as_string();
  const auto spec = optimizer_spec_of(info.name);
  if (!spec) optimizer.at("name").fail("unknown optimizer '" + info.name + "' (known: " + kOptimizerForms + ")");
  info.name = spec->text();
  info.state_bytes = as_bytes(optimizer.at("state_bytes"));
  info.state_bytes_per_param = optimizer.at("state_bytes_per_param").as_double();
  if (!(info.state_bytes_per_param >= 0 && info.state_bytes_per_param <= 1024)) {
    optimizer.at("state_bytes_per_param").fail("expected a number from 0 to 1024");
  }
  if (optimizer.has("host_ns_per_param")) {
    // Nanoseconds per parameter element: a CPU steps Adam at a few per nanosecond, not one per second.
    info.host_ns_per_param = optimizer.at("host_ns_per_param").as_double();
    if (!(info.host_ns_per_param > 0 && info.host_ns_per_param <= 1e9)) {
      optimizer.at("host_ns_per_param").fail("expected a number above 0, at most 1e9");
    }
  }
  if (optimizer.has("torch_optim_tensors")) info.torch_optim_tensors = as_count(optimizer.at("torch_optim_tensors"));
  if (info.step_count_bytes(info.name) > info.state_bytes) {
    optimizer.at("torch_optim_tensors").fail("its step counts alone take more than state_bytes");
  }
  if (optimizer.has("largest_param_elements")) {
    info.largest_param_elements = optimizer.at("largest_param_elements").as_int_in(1, kMaxTraceBytes);
  }
  if (optimizer.has("param_tensors")) info.param_tensors = optimizer.at("param_tensors").as_int_in(1, kMaxTraceBytes);
  return info;
}

ProfileSettings read_profile_settings(const JsonNode& profile) {
  ProfileSettings settings;
  settings.warmup_steps = as_count(profile.at("warmup_steps"));
  settings.repeats = as_count(profile.at("repeats"));
  settings.seed = static_cast<std::uint64_t>(profile.at("seed").as_non_negative_int());
  settings.threads = as_count(profile.at("threads"));
  settings.recorded_at = profile.at("recorded_at").as_string();
  if (profile.has("timing_seconds")) {
    settings.timing_seconds = profile.at("timing_seconds").as_double();
    if (!(*settings.timing_seconds >= 0 && *settings.timing_seconds <= kMaxTimingSeconds)) {
      profile.at("timing_seconds").fail("expected 0 to " + std::to_string(static_cast<int>(kMaxTimingSeconds)) + " seconds");
    }
  }
  return settings;
}

std::vector<std::int64_t> read_batch_sizes(const JsonNode& batch_sizes) {
  std::vector<std::int64_t> out;
  for (const auto& b : batch_sizes.elements()) {
    const std::int64_t v = as_batch(b);
    if (!out.empty() && v <= out.back()) {
      b.fail("batch sizes must be strictly ascending");
    }
    out.push_back(v);
  }
  if (out.empty()) batch_sizes.fail("expected at least one batch size");
  return out;
}

// The cost model reads the held-inputs figure for every sample or for none.
void expect_held_inputs_everywhere_or_nowhere(const std::vector<JsonNode>& layer_nodes,
                                              const std::vector<LayerProfile>& layers) {
  const bool held = layers.front().samples.front().bwd_inputs_held_extra_bytes.has_value();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& samples = layers[i].samples;
    for (std::size_t k = 0; k < samples.size(); ++k) {
      if (samples[k].bwd_inputs_held_extra_bytes.has_value() != held) {
        layer_nodes[i].at("samples").elements()[k].fail(held ? "missing \"bwd_inputs_held_extra_bytes\" (the first layer's samples have it)"
                                                             : "unexpected \"bwd_inputs_held_extra_bytes\" (the first layer's samples have none)");
      }
    }
  }
}

// Reads the layers after the model, the device and the batch sizes, which they are checked against.
std::vector<LayerProfile> read_layers(const JsonNode& root, const Trace& trace) {
  const auto layers = root.at("layers").elements();
  if (layers.empty()) root.at("layers").fail("expected at least one layer");
  if (static_cast<std::int64_t>(layers.size()) > kMaxTraceLayers) {
    root.at("layers").fail("expected at most " + std::to_string(kMaxTraceLayers) + " layers, got " + std::to_string(layers.size()));
  }
  std::vector<LayerProfile> out;
  std::map<std::string, std::size_t> names;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    out.push_back(read_layer(layers[i], static_cast<int>(i), trace.batch_sizes, trace.device.is_cuda(), !trace.model.is_users_module()));
    // Plans, reports and the desktop app name layers: a name must say which one.
    const auto [earlier, fresh] = names.emplace(out.back().name, i);
    if (!fresh) {
      layers[i].at("name").fail("'" + out.back().name + "' is already the name of layer " +
                                std::to_string(earlier->second));
    }
  }
  expect_held_inputs_everywhere_or_nowhere(layers, out);
  return out;
}

// A Tempo pass measures whole steps as well as its layers' Tempo variants: both or neither.
void read_tempo_steps(const JsonNode& root, Trace& trace) {
  const bool tempo_layers =
      std::any_of(trace.layers.begin(), trace.layers.end(), [](const LayerProfile& l) { return l.tempo.has_value(); });
  if (root.has("tempo_steps")) {
    if (!tempo_layers) root.at("tempo_steps").fail("unexpected: no layer has a \"tempo\" profile");
    trace.tempo_steps = read_steps(root.at("tempo_steps"), trace.batch_sizes, trace.device.is_cuda());
  } else if (tempo_layers) {
    root.fail("missing \"tempo_steps\" (layers have \"tempo\" profiles)");
  }
}

// A trace in other_precisions measures the trace's own model alike but for the precision: a
// comparison of them, and a plan's choice between them, then differ by the precision alone.
void expect_measured_alike(const JsonNode& element, const Trace& other, const Trace& trace) {
  // The same model: plans of either precision name the same layers and blocks.
  bool same = other.model.name == trace.model.name && other.layers.size() == trace.layers.size();
  for (std::size_t i = 0; same && i < trace.layers.size(); ++i) {
    same = other.layers[i].name == trace.layers[i].name && other.layers[i].block == trace.layers[i].block &&
           other.layers[i].inputs == trace.layers[i].inputs;
  }
  if (!same) element.at("layers").fail("expected the same model's layers as the trace's own (" + trace.model.name + ")");
  if (!(other.model == trace.model)) element.at("model").fail("expected the trace's own model, its configuration and file");
  if (other.device.kind != trace.device.kind || other.device.name != trace.device.name) {
    element.at("device").fail("expected the trace's own device (" + trace.device.name + ")");
  }
  if (other.profile.threads != trace.profile.threads) {
    element.at("profile").at("threads").fail("expected the trace's own threads (" + std::to_string(trace.profile.threads) + ")");
  }
  if (other.optimizer.name != trace.optimizer.name) {
    element.at("optimizer").at("name").fail("expected the trace's own optimizer (" + trace.optimizer.name + ")");
  }
  if (other.batch_sizes != trace.batch_sizes) element.at("batch_sizes").fail("expected the trace's own batch sizes");
}

Trace read_trace(const JsonNode& root, bool nested);

void read_other_precisions(const JsonNode& root, bool nested, Trace& trace) {
  if (nested) root.at("other_precisions").fail("unexpected: a trace in other_precisions holds no further ones");
  for (const auto& element : root.at("other_precisions").elements()) {
    Trace other = read_trace(element, true);
    if (trace.in_precision(other.precision) != nullptr) {
      element.fail("precision " + std::string(precision_name(other.precision)) + " is measured twice");
    }
    expect_measured_alike(element, other, trace);
    trace.other_precisions.push_back(std::move(other));
  }
}

// The sections are read in the document's order of dependence: the layers are checked against the
// device and the batch sizes, the other precisions against the whole trace.
Trace read_trace(const JsonNode& root, bool nested) {
  expect_schema(root, kTraceSchema);
  Trace trace;
  trace.model = read_model(root.at("model"));
  trace.device = read_device(root.at("device"));
  trace.framework = read_framework(root.at("framework"));
  read_optional_sections(root, trace);
  trace.optimizer = read_optimizer(root.at("optimizer"));
  trace.profile = read_profile_settings(root.at("profile"));
  trace.batch_sizes = read_batch_sizes(root.at("batch_sizes"));
  trace.layers = read_layers(root, trace);
  trace.steps = read_steps(root.at("steps"), trace.batch_sizes, trace.device.is_cuda());
  read_tempo_steps(root, trace);
  if (root.has("contrastive_loss")) {
    trace.contrastive_loss = read_contrastive_profile(root.at("contrastive_loss"), trace.layers.size());
  }
  if (root.has("other_precisions")) read_other_precisions(root, nested, trace);
  return trace;
}

}  // namespace

Trace trace_from_json(const nlohmann::json& document, std::string_view source) {
  try {
    return read_trace(JsonNode(document, "$"), false);
  } catch (const InputError& e) {
    throw InputError(std::string(source) + ": " + e.what());
  }
}

Trace read_trace_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  return trace_from_json(parse_json(text, path.string()), path.string());
}

void write_trace_file(const std::filesystem::path& path, const Trace& trace) {
  write_file_atomically(path, to_json(trace).dump(1) + "\n");
}

}  // namespace headroom::core
