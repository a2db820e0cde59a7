#pragma once
// A plan: how to run one training step of a traced model under a memory budget (schema
// headroom.plan/1). It names its trace by path and sha256 so it can be simulated and executed alone.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/calibration.h"
#include "core/precision.h"
#include "core/static_memory.h"
#include "core/step_choice.h"
#include "core/step_figures.h"

namespace headroom::core {

inline constexpr std::string_view kPlanSchema = "headroom.plan/1";
// The largest global batch a plan may have (the planner takes no more; the reader rejects more, so
// sums of micro-batch sizes stay small).
inline constexpr std::int64_t kMaxPlanBatch = std::int64_t{1} << 20;
// The largest block index or layer id a plan may name (a trace has at most kMaxTraceLayers layers).
inline constexpr std::int64_t kMaxPlanLayers = std::int64_t{1} << 14;
// The largest budget a plan may have (as a trace's byte counts: 16 TiB).
inline constexpr std::int64_t kMaxPlanBudget = std::int64_t{1} << 44;

using PlanPrediction = StepFigures;

// Another plan the search weighed, and why it lost.
struct RunnerUp {
  std::int64_t micro_batch = 0;
  int checkpointed_blocks = 0;
  PlanPrediction predicted;
  std::string verdict;
  bool operator==(const RunnerUp&) const = default;
};

struct Plan {
  std::string trace_path;
  std::string trace_sha256;
  std::string model;
  std::string device;
  std::int64_t budget_bytes = 0;
  std::int64_t margin_bytes = 0;  // the plan's peak stays at or below budget - margin
  std::int64_t global_batch = 0;
  std::vector<std::string> strategies;  // applied (a subset of the allowed ones)
  // How the step runs: micro-batch sizes summing to global_batch, checkpointed blocks, and one
  // entry per trace layer.
  StepChoice choice;
  std::vector<std::string> warnings;
  // The optimizer the plan was made for when it is not the trace's (its state then estimated);
  // empty: the trace's.
  std::string optimizer;
  PlanPrediction predicted;
  // The figures of the step's parts a technique adds that execute's report sets beside what it
  // measured (L2L's lanes and host peak, data parallel's all-reduce), each named by its technique
  // (core/l2l_stages.h, core/collective.h); empty where the step has none. Carried so that no
  // front end asks the planner again after a run.
  std::map<std::string, double> predicted_parts;
  // Why the plan is what it is.
  std::string binding_constraint;
  std::string peak_at;  // where in the step the predicted peak occurs
  std::vector<RunnerUp> runner_ups;
  // The machine the predicted times hold for: the trace's, or the one the plan was made on where
  // its times were rescaled to it. Absent where the trace has no calibration.
  std::optional<Calibration> calibration;
  // The intra-op threads the step was profiled with and is run with.
  int threads = 0;
  // The precision the step runs in: its trace's (written when not fp32).
  Precision precision = Precision::Fp32;
  // What the step holds throughout, by kind (its trace's, for the plan's optimizer); absent in
  // plans from before it was recorded.
  std::optional<StaticMemory> static_memory;

  bool operator==(const Plan&) const = default;

  // The part named `name` (predicted_parts), if the plan carries it.
  std::optional<double> predicted_part(std::string_view name) const;

  // Loss weight of micro-batch i: b_i / B, which makes accumulated gradients equal the full batch's.
  double loss_weight(std::size_t i) const {
    return static_cast<double>(choice.micro_batches[i]) / static_cast<double>(global_batch);
  }
};

nlohmann::json to_json(const Plan& plan);
// Validates the whole document; throws InputError "<source>: <json path>: <problem>".
Plan plan_from_json(const nlohmann::json& document, std::string_view source = "plan");

Plan read_plan_file(const std::filesystem::path& path);

struct Trace;
// The plan's trace: its path as recorded, or else the same name beside the plan file. Throws
// InputError if it is missing or its sha256 differs from the one the plan was made from.
Trace load_plan_trace(const Plan& plan, const std::filesystem::path& plan_file);
void write_plan_file(const std::filesystem::path& path, const Plan& plan);

}  // namespace headroom::core
