#include "core/plan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/json_reader.h"
#include "core/link_json.h"
#include "core/precision_json.h"
#include "core/known_names.h"
#include "core/optimizer_spec.h"
#include "core/l2l_choice_json.h"
#include "core/l2l_stages.h"
#include "core/rescale.h"
#include "core/sha256.h"
#include "core/sharding.h"
#include "core/strategies.h"
#include "core/trace.h"

namespace headroom::core {

nlohmann::json to_json(const Plan& plan) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : plan.choice.layers) {
    layers.push_back(
        {{"id", l.id}, {"name", l.name}, {"checkpoint", l.checkpoint}, {"variant", variant_name(l.variant)}});
  }
  nlohmann::json runner_ups = nlohmann::json::array();
  for (const auto& r : plan.runner_ups) {
    runner_ups.push_back({{"micro_batch", r.micro_batch},
                          {"checkpointed_blocks", r.checkpointed_blocks},
                          {"predicted", to_json(r.predicted)},
                          {"verdict", r.verdict}});
  }
  nlohmann::json weights = nlohmann::json::array();
  for (std::size_t i = 0; i < plan.choice.micro_batches.size(); ++i) weights.push_back(plan.loss_weight(i));
  nlohmann::json document = {
      {"schema", kPlanSchema},
      {"trace", {{"path", plan.trace_path}, {"sha256", plan.trace_sha256}, {"model", plan.model}, {"device", plan.device}}},
      {"budget_bytes", plan.budget_bytes},
      {"margin_bytes", plan.margin_bytes},
      {"global_batch", plan.global_batch},
      {"strategies", plan.strategies},
      {"micro_batches", plan.choice.micro_batches},
      {"loss_weights", weights},
      {"checkpointed_blocks", plan.choice.checkpointed_blocks},
      {"layers", layers},
      {"warnings", plan.warnings},
      {"predicted", to_json(plan.predicted)},
      {"explanation", {{"binding_constraint", plan.binding_constraint}, {"peak_at", plan.peak_at}, {"runner_ups", runner_ups}}},
  };
  // Only when it differs from the trace's, so plans made with the measured optimizer stay as they were.
  if (!plan.optimizer.empty()) document["optimizer"] = plan.optimizer;
  if (!plan.predicted_parts.empty()) document["predicted_parts"] = plan.predicted_parts;
  if (plan.calibration) document["calibration"] = to_json(*plan.calibration);
  if (plan.threads > 0) document["threads"] = plan.threads;
  if (plan.precision != Precision::Fp32) document["precision"] = std::string(precision_name(plan.precision));
  if (plan.static_memory) document["static_memory"] = to_json(*plan.static_memory);
  if (const auto& dp = plan.choice.data_parallel) {
    document["world_size"] = dp->workers;
    document["data_parallel"] = {
        {"micro_batches_per_worker", dp->micro_batches_per_worker},
        {"bucket_cap_bytes", dp->bucket_cap_bytes},
        {"link", to_json(dp->link)},
    };
  }
  // Written where it shards: a stage-0 plan reads as plans did before sharding.
  if (plan.choice.data_parallel && plan.choice.data_parallel->shard_stage > 0) {
    document["data_parallel"]["shard_stage"] = plan.choice.data_parallel->shard_stage;
    if (plan.choice.data_parallel->shard_stage >= 3) {
      document["data_parallel"]["gather"] = std::string(gather_unit_name(plan.choice.data_parallel->gather));
    }
  }
  if (plan.choice.ring_loss) document["ring_loss"] = true;
  if (plan.choice.loss_tiles) {
    document["loss_tiles"] = {{"rows", plan.choice.loss_tiles->rows}, {"cols", plan.choice.loss_tiles->cols}};
  }
  write_l2l_choice(document, plan.choice.l2l);
  return document;
}

std::optional<double> Plan::predicted_part(std::string_view name) const {
  const auto found = predicted_parts.find(std::string(name));
  if (found == predicted_parts.end()) return std::nullopt;
  return found->second;
}

namespace {

// The parts a plan may carry, as the techniques name them (core/l2l_stages.h, core/collective.h),
// and its time by class of work (core/rescale.h).
constexpr std::array<std::string_view, 16> kPredictedPartNames = {
    kL2LComputeSecondsPart,      kL2LCopySecondsPart,
    kL2LWaitSecondsPart,         kL2LHostOptimizerSecondsPart,
    kL2LHostBytesPart,           kAllReduceSecondsPart,
    kExposedAllReduceSecondsPart, kParameterBroadcastSecondsPart,
    kGradientReduceSecondsPart,  kExposedGradientReduceSecondsPart,
    kParameterGatherSecondsPart, kExposedParameterGatherSecondsPart,
    kMatmulBoundSecondsPart,     kComputeBoundSecondsPart,
    kMemoryBoundSecondsPart,     kComputeBesideCollectivesSecondsPart};

// A layer's variant: `"variant": "tempo"`; plans written before the step choice had a `"tempo"`
// flag, and plans from before Tempo have neither (standard).
LayerVariant read_variant(const JsonNode& layer) {
  if (layer.has("variant")) {
    if (layer.has("tempo")) layer.at("tempo").fail("give either variant or the older tempo flag, not both");
    const std::string name = layer.at("variant").as_string();
    if (const auto variant = variant_named(name)) return *variant;
    layer.at("variant").fail("unknown layer variant '" + name + "' (expected " + variant_names() + ")");
  }
  if (layer.has("tempo") && layer.at("tempo").as_bool()) return LayerVariant::Tempo;
  return LayerVariant::Standard;
}

// How a data-parallel plan's micro-batches fall to its `workers`, and what its all-reduce runs over.
DataParallelChoice read_data_parallel(const JsonNode& root, int workers, const StepChoice& choice) {
  const auto node = root.at("data_parallel");
  if (workers == 1) node.fail("given for one worker (world_size 1)");
  DataParallelChoice dp;
  dp.workers = workers;
  const auto counts = node.at("micro_batches_per_worker");
  const auto elements = counts.elements();
  if (elements.size() != static_cast<std::size_t>(workers)) {
    counts.fail("expected one count per worker (" + std::to_string(workers) + "), got " + std::to_string(elements.size()));
  }
  std::size_t total = 0;
  for (const auto& e : elements) {
    const auto n = static_cast<int>(e.as_int_in(1, kMaxPlanBatch));
    dp.micro_batches_per_worker.push_back(n);
    total += static_cast<std::size_t>(n);
  }
  if (total != choice.micro_batches.size()) {
    counts.fail("counts sum to " + std::to_string(total) + ", but the plan has " +
                std::to_string(choice.micro_batches.size()) + " micro-batches");
  }
  dp.bucket_cap_bytes = node.at("bucket_cap_bytes").as_int_in(1, kMaxPlanBudget);
  // Plans from before sharding replicate the training state.
  if (node.has("shard_stage")) dp.shard_stage = static_cast<int>(node.at("shard_stage").as_int_in(0, kMaxShardStage));
  // Stage-3 plans from before gathering per block gathered each layer's.
  if (dp.shard_stage >= 3 && node.has("gather")) {
    const JsonNode gather = node.at("gather");
    const std::string text = gather.as_string();
    if (text != "block" && text != "layer") gather.fail("expected block or layer, got '" + text + "'");
    dp.gather = parse_gather_unit(text, gather.path());
  } else if (dp.shard_stage >= 3) {
    dp.gather = GatherUnit::Layer;
  } else if (node.has("gather")) {
    node.at("gather").fail("only a stage-3 plan gathers parameters; this one is at stage " + std::to_string(dp.shard_stage));
  }
  dp.link = read_link(node.at("link"));
  return dp;
}

// The trace the plan was made from: load_plan_trace finds it by path and checks its digest.
void read_trace_reference(const JsonNode& trace, Plan& plan) {
  plan.trace_path = trace.at("path").as_string();
  if (plan.trace_path.empty()) trace.at("path").fail("expected the trace's path");
  plan.trace_sha256 = trace.at("sha256").as_string();
  if (plan.trace_sha256.size() != 64) trace.at("sha256").fail("expected 64 hex digits");
  plan.model = trace.at("model").as_string();
  plan.device = trace.at("device").as_string();
}

void read_budget_and_batch(const JsonNode& root, Plan& plan) {
  // A plan always has a budget; only `execute --no-budget` runs without one.
  plan.budget_bytes = root.at("budget_bytes").as_int_in(1, kMaxPlanBudget);
  plan.margin_bytes = root.at("margin_bytes").as_int_in(0, plan.budget_bytes);
  plan.global_batch = root.at("global_batch").as_non_negative_int();
  if (plan.global_batch == 0) root.at("global_batch").fail("expected a positive batch size");
  if (plan.global_batch > kMaxPlanBatch) {
    root.at("global_batch").fail("expected at most " + std::to_string(kMaxPlanBatch) + ", got " + std::to_string(plan.global_batch));
  }
}

std::vector<std::string> read_strategies(const JsonNode& strategies) {
  std::vector<std::string> out;
  for (const auto& s : strategies.elements()) {
    out.push_back(s.as_string());
    if (!is_known(kStrategyNames, out.back())) {
      s.fail("unknown strategy '" + out.back() + "' (known: " + name_list(kStrategyNames) + ")");
    }
  }
  return out;
}

// The micro-batch sizes, which sum to the global batch.
std::vector<std::int64_t> read_micro_batches(const JsonNode& micro, std::int64_t global_batch) {
  std::vector<std::int64_t> out;
  std::int64_t sum = 0;
  for (const auto& m : micro.elements()) {
    const std::int64_t size = m.as_non_negative_int();
    if (size == 0) m.fail("expected a positive micro-batch size");
    // Past the global batch the sum can only be wrong; checking here keeps it from overflowing.
    if (size > global_batch) m.fail("micro-batch of " + std::to_string(size) + " is larger than the global batch");
    sum += size;
    if (sum > global_batch) {
      micro.fail("sizes sum to " + std::to_string(sum) + " or more, not the global batch " + std::to_string(global_batch));
    }
    out.push_back(size);
  }
  if (sum != global_batch) {
    micro.fail("sizes sum to " + std::to_string(sum) + ", not the global batch " + std::to_string(global_batch));
  }
  return out;
}

// Written for the reader's benefit; the executor weighs by b_i / B, so an edited weight would
// mislead.
void expect_loss_weights_of_sizes(const JsonNode& root, const Plan& plan) {
  const auto weights = root.at("loss_weights").elements();
  if (weights.size() != plan.choice.micro_batches.size()) {
    root.at("loss_weights").fail("expected one weight per micro-batch (" +
                                 std::to_string(plan.choice.micro_batches.size()) + ")");
  }
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (std::abs(weights[i].as_double() - plan.loss_weight(i)) > 1e-9) {
      weights[i].fail("expected b_i / B = " + std::to_string(plan.loss_weight(i)) +
                      " (weights follow the micro-batch sizes; edit those instead)");
    }
  }
}

std::vector<int> read_checkpointed_blocks(const JsonNode& node) {
  const auto blocks = node.elements();
  std::vector<int> chosen;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const int block = static_cast<int>(blocks[i].as_int_in(0, kMaxPlanLayers - 1));
    const auto earlier = std::find(chosen.begin(), chosen.end(), block);
    if (earlier != chosen.end()) {
      blocks[i].fail("block " + std::to_string(block) + " is already checkpointed at index " +
                     std::to_string(earlier - chosen.begin()));
    }
    chosen.push_back(block);
  }
  return chosen;
}

std::vector<LayerStep> read_layer_steps(const JsonNode& node) {
  const auto layers = node.elements();
  std::vector<LayerStep> out;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    LayerStep step;
    // Compared as read: an id past int's range must not wrap to the expected one.
    if (layers[i].at("id").as_int() != static_cast<std::int64_t>(i)) layers[i].at("id").fail("expected " + std::to_string(i));
    step.id = static_cast<int>(i);
    step.name = layers[i].at("name").as_string();
    step.checkpoint = layers[i].at("checkpoint").as_bool();
    step.variant = read_variant(layers[i]);
    out.push_back(step);
  }
  return out;
}

// The techniques the step runs besides micro-batching and checkpointing: data parallel workers,
// the ring's Inf-CL loss and its tiles, and L2L.
void read_technique_choices(const JsonNode& root, StepChoice& choice) {
  const int workers = root.has("world_size") ? static_cast<int>(root.at("world_size").as_int_in(1, kMaxWorkers)) : 1;
  if (workers > 1 || root.has("data_parallel")) choice.data_parallel = read_data_parallel(root, workers, choice);
  // Whether the plan's workers and its model run the ring is checked against the trace (planner::check_choice).
  if (root.has("ring_loss")) choice.ring_loss = root.at("ring_loss").as_bool();
  if (root.has("loss_tiles")) {
    const auto tiles = root.at("loss_tiles");
    choice.loss_tiles = LossTiles{tiles.at("rows").as_int_in(1, kMaxPlanBatch), tiles.at("cols").as_int_in(1, kMaxPlanBatch)};
  }
  choice.l2l = read_l2l_choice(root);
}

// What the plan was made under when it differs from the trace: the optimizer, a calibration,
// threads, the precision, the static memory.
void read_planning_settings(const JsonNode& root, Plan& plan) {
  if (root.has("optimizer")) {
    plan.optimizer = root.at("optimizer").as_string();
    const auto spec = optimizer_spec_of(plan.optimizer);
    if (!spec) root.at("optimizer").fail("unknown optimizer '" + plan.optimizer + "' (known: " + kOptimizerForms + ")");
    plan.optimizer = spec->text();
  }
  if (root.has("calibration")) plan.calibration = read_calibration(root.at("calibration"));
  if (root.has("threads")) plan.threads = static_cast<int>(root.at("threads").as_int_in(1, 4096));
  if (root.has("precision")) plan.precision = read_precision(root.at("precision"));
  if (root.has("static_memory")) plan.static_memory = read_static_memory(root.at("static_memory"));
}

double read_predicted_part(const JsonNode& node, const std::string& name, double step_seconds) {
  if (std::find(kPredictedPartNames.begin(), kPredictedPartNames.end(), name) == kPredictedPartNames.end()) {
    std::string known;
    for (const auto part : kPredictedPartNames) known += (known.empty() ? "" : ", ") + std::string(part);
    node.fail("unknown part (known: " + known + ")");
  }
  const double figure = node.as_double();
  // Seconds or bytes: finite, not negative, within what a trace can hold.
  if (!(figure >= 0 && figure <= 1e18)) node.fail("expected a figure from 0 to 1e18");
  // A class of work twice as slow lengthens the step by at most the step.
  const bool by_class = name == kMatmulBoundSecondsPart || name == kComputeBoundSecondsPart || name == kMemoryBoundSecondsPart;
  if (by_class && figure > step_seconds * (1 + 1e-9)) {
    char text[160];
    std::snprintf(text, sizeof text, "expected at most the predicted step (%.6g s), got %.6g", step_seconds, figure);
    node.fail(text);
  }
  return figure;
}

// Read after the predicted figures, which a part by class of work is checked against.
std::map<std::string, double> read_predicted_parts(const JsonNode& parts, double step_seconds) {
  parts.expect_object();
  std::map<std::string, double> out;
  for (const auto& item : parts.raw().items()) {
    out[item.key()] = read_predicted_part(parts.at(item.key()), item.key(), step_seconds);
  }
  return out;
}

void read_explanation(const JsonNode& explanation, Plan& plan) {
  plan.binding_constraint = explanation.at("binding_constraint").as_string();
  plan.peak_at = explanation.at("peak_at").as_string();
  for (const auto& r : explanation.at("runner_ups").elements()) {
    RunnerUp up;
    up.micro_batch = r.at("micro_batch").as_int_in(1, kMaxPlanBatch);
    up.checkpointed_blocks = static_cast<int>(r.at("checkpointed_blocks").as_int_in(0, kMaxPlanLayers));
    up.predicted = read_step_figures(r.at("predicted"));
    up.verdict = r.at("verdict").as_string();
    plan.runner_ups.push_back(up);
  }
}

Plan read_plan(const JsonNode& root) {
  expect_schema(root, kPlanSchema);
  Plan plan;
  read_trace_reference(root.at("trace"), plan);
  read_budget_and_batch(root, plan);
  plan.strategies = read_strategies(root.at("strategies"));
  plan.choice.micro_batches = read_micro_batches(root.at("micro_batches"), plan.global_batch);
  expect_loss_weights_of_sizes(root, plan);
  plan.choice.checkpointed_blocks = read_checkpointed_blocks(root.at("checkpointed_blocks"));
  plan.choice.layers = read_layer_steps(root.at("layers"));
  read_technique_choices(root, plan.choice);
  for (const auto& w : root.at("warnings").elements()) plan.warnings.push_back(w.as_string());
  read_planning_settings(root, plan);
  plan.predicted = read_step_figures(root.at("predicted"));
  if (root.has("predicted_parts")) plan.predicted_parts = read_predicted_parts(root.at("predicted_parts"), plan.predicted.step_seconds);
  read_explanation(root.at("explanation"), plan);
  return plan;
}

}  // namespace

Plan plan_from_json(const nlohmann::json& document, std::string_view source) {
  try {
    return read_plan(JsonNode(document, "$"));
  } catch (const InputError& e) {
    throw InputError(std::string(source) + ": " + e.what());
  }
}

Plan read_plan_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  return plan_from_json(parse_json(text, path.string()), path.string());
}

Trace load_plan_trace(const Plan& plan, const std::filesystem::path& plan_file) {
  std::filesystem::path path = plan.trace_path;
  if (!std::filesystem::exists(path) && path.is_relative()) {
    const auto beside = plan_file.parent_path() / path.filename();
    if (std::filesystem::exists(beside)) path = beside;
  }
  if (!std::filesystem::exists(path)) {
    throw InputError(plan_file.string() + ": the trace it was made from, " + plan.trace_path + ", does not exist");
  }
  const std::string text = read_file(path);
  const std::string digest = sha256_hex(text);
  if (digest != plan.trace_sha256) {
    throw InputError(plan_file.string() + ": trace " + path.string() + " changed since planning (sha256 " +
                     digest.substr(0, 12) + "..., the plan expects " + plan.trace_sha256.substr(0, 12) + "...)");
  }
  Trace trace = trace_from_json(parse_json(text, path.string()), path.string());
  // A trace of several precisions: the plan's figures are those of the one it was made for.
  const Trace* measured = trace.in_precision(plan.precision);
  if (measured == nullptr) {
    throw InputError(plan_file.string() + ": the plan runs the step in " + std::string(precision_name(plan.precision)) +
                     " but its trace was measured in " + trace.precision_list());
  }
  if (measured == &trace) return trace;
  Trace chosen = *measured;
  return chosen;
}

void write_plan_file(const std::filesystem::path& path, const Plan& plan) {
  write_file_atomically(path, to_json(plan).dump(1) + "\n");
}

}  // namespace headroom::core
