// The bounded plan search (planner/split_bounds.h): past a few dozen splits plan_step weighs only
// the splits that may be chosen, named or charted, setting ranges of micro-batch sizes aside by
// lower bounds. The plans must be those of weighing every split; the bounds must hold wherever the
// search uses them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "core/cost_model.h"
#include "core/json_reader.h"
#include "planner/checkpoint_dp.h"
#include "planner/plan_search.h"
#include "planner/split_bounds.h"
#include "planner/step_sequence.h"
#include "support/random_chain.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

core::Trace committed(const std::string& name) { return core::read_trace_file(fs::path(HEADROOM_TRACES_DIR) / name); }

// Random chains small enough to try every subset: the bound on the least recompute is that least
// recompute (nothing needs merging), and nothing when no subset fits; the bound on the least peak
// is at most every subset's peak. Kept sizes may be 0 or less (a stage that frees more than it keeps).
TEST(CheckpointDp, RecomputeBoundIsTheLeastRecomputeOfSmallChains) {
  std::mt19937 rng(36);
  int feasible = 0;
  for (int round = 0; round < 400; ++round) {
    const planner::Chain chain = testing::random_chain(rng, {.stored_lo = -5, .checkpointed_lo = -5, .checkpointed_peak_lo = -10, .recompute_lo = 0});
    const auto n = static_cast<std::int64_t>(chain.stages.size());
    const std::int64_t limit = testing::draw(rng, chain.base - 10, chain.base + 40 * n);
    const auto brute = planner::solve_checkpoint_exhaustive(chain, limit);
    const auto bound = planner::least_recompute_bound(chain, limit);
    ASSERT_EQ(bound.has_value(), brute.feasible) << "round " << round;
    if (brute.feasible) {
      ++feasible;
      EXPECT_EQ(*bound, brute.recompute_ns) << "round " << round;
    }
    // The least peak of any subset: the exhaustive search at the lowest limit that admits one.
    const auto least_peak = planner::least_chain_peak_bound(chain);
    EXPECT_FALSE(planner::solve_checkpoint_exhaustive(chain, least_peak - 1).feasible) << "round " << round;
  }
  EXPECT_GT(feasible, 100);
}

// Chains too long to keep every kept size apart: merged, the bound stays at most what the DP finds.
TEST(CheckpointDp, RecomputeBoundOfLongChainsIsAtMostTheDps) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    planner::Chain chain;
    chain.base = 1000;
    for (int k = 0; k < 60; ++k) {
      const std::int64_t stored = std::uniform_int_distribution<std::int64_t>(100, 900)(rng);
      chain.stages.push_back({stored, stored / 5 + k, stored + 333, stored / 5 + 400, 10 + k * 7 % 13, true});
    }
    const std::int64_t limit = std::uniform_int_distribution<std::int64_t>(6000, 30000)(rng);
    const auto dp = planner::solve_checkpoint_dp(chain, limit, 1);
    const auto bound = planner::least_recompute_bound(chain, limit);
    if (dp.feasible) {
      ASSERT_TRUE(bound.has_value()) << "round " << round;
      EXPECT_LE(*bound, dp.recompute_ns) << "round " << round;
    }
  }
}

// A micro-batch of b samples, of a size in one of affine_ranges (or one below it), takes at least
// b * sample_ns - micro_batch_slack_ns whatever its layer variants, and a checkpointed block
// recomputes for at least its bound.
TEST(SplitBounds, TimeBoundHoldsThroughEachRange) {
  for (const std::string name : {"cpu-bert.json", "cpu-gpt.json", "cpu-cnn.json"}) {
    SCOPED_TRACE(name);
    const core::Trace trace = committed(name);
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    int checked = 0;
    for (const planner::SizeRange range : planner::affine_ranges(costs, 200)) {
      const std::int64_t below = std::max<std::int64_t>(1, range.lo - 1);
      const planner::TimeBound bound =
          planner::time_bound(costs, graph, planner::batch_costs(costs, below), planner::batch_costs(costs, range.hi));
      ASSERT_TRUE(bound.valid);
      for (std::int64_t b = below; b <= range.hi; b += std::max<std::int64_t>(1, (range.hi - below) / 7)) {
        core::StepChoice lean = graph.all_lean();
        core::StepChoice every_block;
        for (const auto& span : graph.blocks()) {
          if (span.checkpointable) every_block.checkpointed_blocks.push_back(span.block);
        }
        std::int64_t recompute = 0;
        for (std::size_t k = 0; k < graph.blocks().size(); ++k) {
          if (graph.blocks()[k].checkpointable) recompute += bound.block_recompute_ns[k];
        }
        const double least = static_cast<double>(b) * bound.sample_ns - bound.micro_batch_slack_ns;
        for (const auto& [choice, recomputed] : {std::pair{core::StepChoice{}, std::int64_t{0}}, std::pair{lean, std::int64_t{0}},
                                                 std::pair{every_block, recompute}}) {
          const auto step = planner::predict_step(costs, graph, choice.with_micro_batches({b}));
          EXPECT_GE(static_cast<double>(step.step_ns - costs.optimizer_ns()), least + static_cast<double>(recomputed)) << "batch " << b;
          ++checked;
        }
      }
    }
    EXPECT_GT(checked, 20);
  }
}

// The ranges end at the trace's batch sizes (and at the largest asked for); past bert's last, no
// byte count reaches 0 or a limit, so none bends.
TEST(SplitBounds, RangesAreCutAtTheTracesBatchSizes) {
  const core::Trace trace = committed("cpu-bert.json");  // profiled at 1, 2, 4, 8, 16
  const core::CostModel costs(trace);
  const auto ranges = planner::affine_ranges(costs, 1000);
  ASSERT_EQ(ranges.size(), 6u);
  EXPECT_EQ(ranges.front().lo, 1);
  EXPECT_EQ(ranges.front().hi, 1);
  EXPECT_EQ(ranges[4].lo, 9);
  EXPECT_EQ(ranges[4].hi, 16);
  EXPECT_EQ(ranges.back().lo, 17);
  EXPECT_EQ(ranges.back().hi, 1000);
  EXPECT_EQ(planner::affine_ranges(costs, 3).back().hi, 3);
  EXPECT_TRUE(planner::bytes_unbent(costs, planner::batch_costs(costs, 17), planner::batch_costs(costs, 1000)));
}

planner::PlanRequest request(std::int64_t budget, std::int64_t batch, const std::string& strategies) {
  planner::PlanRequest r;
  r.budget_bytes = budget;
  r.global_batch = batch;
  r.strategies = planner::parse_strategies(strategies);
  r.trace_path = "traces/x.json";
  r.trace_sha256 = std::string(64, '0');
  return r;
}

struct SearchTally {
  int compared = 0, bounded = 0, planned = 0;
};

void expect_bounded_search_as_every_split(const core::Trace& trace, const std::string& name, const std::vector<std::int64_t>& batches,
                                          SearchTally& tally) {
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const std::int64_t floor = costs.static_bytes() + costs.optimizer_transient_bytes();
  for (const std::int64_t batch : batches) {
    const std::int64_t whole =
        planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({std::min<std::int64_t>(batch, 64)})).peak_bytes;
    // Tempo with the others (what "all" weighs first; L2L's relay, weighed only where nothing
    // fits without it, is weighed split by split either way).
    for (const std::string strategies : {"mbp,checkpoint", "mbp,checkpoint,tempo"}) {
      for (const double fraction : {0.0005, 0.01, 0.1, 0.5, 2.0}) {
        for (const int workers : {1, 3}) {
          if (workers > 1 && (fraction != 0.1 || strategies == "mbp,checkpoint")) continue;
          planner::PlanRequest r = request(
              static_cast<std::int64_t>(static_cast<double>(floor) / 0.95 + fraction * static_cast<double>(whole - floor)), batch,
              strategies);
          r.workers = workers;
          if (workers > 1) r.link = {1e10, 10000, "given"};
          SCOPED_TRACE(name + " batch " + std::to_string(batch) + " " + strategies + " budget " + std::to_string(r.budget_bytes) +
                       " workers " + std::to_string(workers));
          const auto fast = planner::plan_step(trace, r);
          r.weigh_every_split = true;
          const auto every = planner::plan_step(trace, r);
          ++tally.compared;
          tally.bounded += fast.splits.size() < every.splits.size();
          tally.planned += every.plan.has_value();
          ASSERT_EQ(fast.plan.has_value(), every.plan.has_value());
          if (every.plan) {
            EXPECT_EQ(*fast.plan, *every.plan);
          } else {
            EXPECT_EQ(fast.reason, every.reason);
            EXPECT_EQ(fast.smallest_budget, every.smallest_budget);
          }
        }
      }
    }
  }
}

// Equal plans are the bounded search's contract: on the committed traces, at batches of hundreds
// to thousands of splits, budgets from the floor to past the whole batch, with and without Tempo,
// on one worker and on several, the plan (its split, choices, prediction, explanation and
// runner-ups) or the reason nothing fits is that of weighing every split.
TEST(PlanSearch, BoundedSearchPlansAsWeighingEverySplit) {
  struct Case {
    std::string trace;
    std::vector<std::int64_t> batches;
  };
  const std::vector<Case> cases = {{"cpu-mlp.json", {1000, 5000}},
                                   {"cpu-cnn.json", {300, 2000}},
                                   {"cpu-gpt.json", {500, 3000}},
                                   {"cpu-bert.json", {300, 1500, 7000}},
                                   {"cpu-bert-large.json", {300, 1100}}};
  SearchTally tally;
  for (const auto& c : cases) expect_bounded_search_as_every_split(committed(c.trace), c.trace, c.batches, tally);
  // Most cases went through the bounded search (a worker's share of a few hundred is weighed
  // split by split), and most of them found a plan.
  EXPECT_GT(tally.bounded, tally.compared * 3 / 4);
  EXPECT_GT(tally.planned, tally.compared / 2);
}

// bert with its matrix products' backward scratch allocated in blocks of 4 samples (as bfloat16's
// is on the CPU): attn_out's is flat at 1, 2 and 4 and then rises along its line, so every
// product's backward is read at the next multiple of 4 between profiled sizes, constant from one
// multiple to the next, and past the last size it is a line again. The ranges are cut at those
// multiples, and the bounded search still plans as weighing every split does.
core::Trace bert_with_blocked_scratch() {
  core::Trace trace = committed("cpu-bert.json");  // profiled at 1, 2, 4, 8, 16
  for (auto& layer : trace.layers) {
    if (layer.name.find("attn_out") == std::string::npos) continue;
    const std::int64_t at_4 = layer.samples[2].bwd_transient_bytes;
    const std::int64_t per_sample = 2 * layer.samples[4].kept_bytes / 16 + 1;
    for (auto& sample : layer.samples) sample.bwd_transient_bytes = at_4 + per_sample * std::max<std::int64_t>(sample.batch - 4, 0);
  }
  return trace;
}

TEST(PlanSearch, RangesAreCutWhereTransientsStepAndTheBoundedSearchPlansAsWeighingEverySplit) {
  const core::Trace trace = bert_with_blocked_scratch();
  const core::CostModel costs(trace);
  ASSERT_EQ(costs.blocks(), std::vector<std::int64_t>{4});
  const auto ranges = planner::affine_ranges(costs, 30);
  ASSERT_EQ(ranges.size(), 7u);  // 1, 2, 3-4, 5-8, 9-12, 13-16, and past the last size 17-30
  EXPECT_EQ(ranges[2].lo, 3);
  EXPECT_EQ(ranges[2].hi, 4);
  EXPECT_EQ(ranges[4].lo, 9);
  EXPECT_EQ(ranges[4].hi, 12);
  EXPECT_EQ(ranges.back().lo, 17);
  EXPECT_EQ(ranges.back().hi, 30);
  // Between multiples the stepped transients hold still, and a product whose own scratch does not
  // step (but never falls) is read at the multiple too.
  int held = 0;
  for (std::size_t i = 0; i < trace.layers.size(); ++i) {
    const auto& samples = trace.layers[i].samples;
    const bool rises = std::is_sorted(samples.begin(), samples.end(), [](const core::LayerSample& a, const core::LayerSample& b) {
      return a.bwd_transient_bytes < b.bwd_transient_bytes;
    });
    if (trace.layers[i].kind != "linear" || !rises) continue;
    EXPECT_EQ(costs.layer(i, 9).bwd_transient_bytes, costs.layer(i, 12).bwd_transient_bytes) << trace.layers[i].name;
    // Past the last size, a line (the last range is not cut).
    const auto at = [&](std::int64_t b) { return costs.layer(i, b).bwd_transient_bytes; };
    EXPECT_NEAR(at(30) - at(24), at(24) - at(18), 2) << trace.layers[i].name;
    ++held;
  }
  EXPECT_GT(held, 4);
  SearchTally tally;
  expect_bounded_search_as_every_split(trace, "bert, blocked", {300, 1500}, tally);
  EXPECT_GT(tally.bounded, tally.compared * 3 / 4);
  EXPECT_GT(tally.planned, tally.compared / 2);
}

// What the bounded search lists for the chart: fewest micro-batches first, each split once, the
// chosen one among them, and one near each power of two up to the whole batch; the splits that fit
// are those weighing every split says fit, with the same prediction.
TEST(PlanSearch, BoundedSearchChartsWhatItWeighed) {
  const core::Trace trace = committed("cpu-bert.json");
  planner::PlanRequest r = request(241LL << 20, 100000, "all");
  const auto outcome = planner::plan_step(trace, r);
  ASSERT_TRUE(outcome.plan);
  ASSERT_FALSE(outcome.splits.empty());
  EXPECT_LT(outcome.splits.size(), 100u);  // of 631 splits
  for (std::size_t i = 1; i < outcome.splits.size(); ++i) EXPECT_LT(outcome.splits[i - 1].count, outcome.splits[i].count);
  EXPECT_EQ(outcome.splits.front().count, 1);
  EXPECT_EQ(outcome.splits.back().micro_batch, 1);
  const auto chosen = std::find_if(outcome.splits.begin(), outcome.splits.end(), [&](const planner::SplitOutcome& s) {
    return s.micro_batch == outcome.plan->choice.micro_batches.front() &&
           s.count == static_cast<std::int64_t>(outcome.plan->choice.micro_batches.size());
  });
  ASSERT_NE(chosen, outcome.splits.end());
  EXPECT_TRUE(chosen->fits);
  r.weigh_every_split = true;
  const auto every = planner::plan_step(trace, r);
  for (const auto& split : outcome.splits) {
    const auto same = std::find_if(every.splits.begin(), every.splits.end(),
                                   [&](const planner::SplitOutcome& s) { return s.count == split.count; });
    ASSERT_NE(same, every.splits.end()) << split.count;
    EXPECT_EQ(same->micro_batch, split.micro_batch);
    EXPECT_EQ(same->fits, split.fits) << split.count;
    EXPECT_EQ(same->predicted, split.predicted) << split.count;
  }
}

}  // namespace
}  // namespace headroom
