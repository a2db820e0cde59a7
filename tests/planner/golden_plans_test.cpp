// Golden, trace-based regression: plans for the committed traces at a few budgets must equal the
// expected plan files in tests/golden. After an intended change, regenerate them with
//   HEADROOM_UPDATE_GOLDEN=1 ctest --preset default -R GoldenPlans
// and review the diff.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/cost_model.h"
#include "core/json_reader.h"
#include "core/plan.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "support/build_paths.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string trace;
  std::int64_t batch;
  double budget_fraction;  // of the way from the static floor to the whole batch's need
  std::string strategies = "mbp,checkpoint";
  int workers = 1;  // data parallel over a 10 GB/s, 20 us link beyond one
};

TEST(GoldenPlans, MatchExpectedFiles) {
  const bool update = std::getenv("HEADROOM_UPDATE_GOLDEN") != nullptr;
  const std::vector<Case> cases = {
      {"cpu-mlp.json", 64, 0.2}, {"cpu-mlp.json", 64, 0.6},  {"cpu-cnn.json", 64, 0.1},  {"cpu-cnn.json", 64, 0.5},
      {"cpu-bert.json", 32, 0.1}, {"cpu-bert.json", 32, 0.4}, {"cpu-bert.json", 32, 1.1}, {"cpu-gpt.json", 32, 0.05},
      {"cpu-gpt.json", 32, 0.3}, {"cpu-gpt.json", 32, 0.7},
      // Tempo with the others.
      {"cpu-bert.json", 32, 0.4, "all"}, {"cpu-gpt.json", 32, 0.3, "all"},
      // Data parallel, and a contrastive model's ring loss across the workers.
      {"cpu-bert.json", 32, 0.4, "all", 2}, {"cpu-clip.json", 256, 0.3, "all", 2},
  };
  for (const auto& c : cases) {
    const fs::path trace_path = fs::path(HEADROOM_TRACES_DIR) / c.trace;
    const core::Trace trace = core::read_trace_file(trace_path);
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    const std::int64_t floor = costs.static_bytes() + costs.optimizer_transient_bytes();
    const std::int64_t whole =
        planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({c.batch})).peak_bytes;
    planner::PlanRequest request;
    request.global_batch = c.batch;
    request.strategies = planner::parse_strategies(c.strategies, c.workers);
    request.workers = c.workers;
    if (c.workers > 1) request.link = core::parse_link("10GB/s,20us");
    // Round the budget to whole KiB so the golden files stay readable.
    request.budget_bytes = static_cast<std::int64_t>(floor / 0.95 + c.budget_fraction * static_cast<double>(whole - floor)) / 1024 * 1024;
    request.trace_path = "traces/" + c.trace;
    request.trace_sha256 = std::string(64, '0');  // golden plans pin the decision, not the file's bytes
    const auto outcome = planner::plan_step(trace, request);
    ASSERT_TRUE(outcome.plan) << c.trace << " " << c.budget_fraction << ": " << outcome.reason;

    const std::string name = fs::path(c.trace).stem().string() + "-b" + std::to_string(c.batch) + "-" +
                             std::to_string(static_cast<int>(c.budget_fraction * 100)) +
                             (c.strategies == "mbp,checkpoint" ? "" : "-" + c.strategies) +
                             (c.workers > 1 ? "-w" + std::to_string(c.workers) : "") + ".json";
    const fs::path golden = fs::path(HEADROOM_GOLDEN_DIR) / name;
    const std::string actual = core::to_json(*outcome.plan).dump(1) + "\n";
    if (update) {
      core::write_file_atomically(golden, actual);
      continue;
    }
    ASSERT_TRUE(fs::exists(golden)) << golden << " is missing: run with HEADROOM_UPDATE_GOLDEN=1";
    const core::Plan expected = core::plan_from_json(core::parse_json(core::read_file(golden), golden.string()));
    EXPECT_EQ(*outcome.plan, expected) << name << " differs from its golden file; if intended, regenerate and review";
  }
}

}  // namespace
}  // namespace headroom
