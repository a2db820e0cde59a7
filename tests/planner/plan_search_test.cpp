#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/cost_model.h"
#include "core/errors.h"
#include "core/plan.h"
#include "core/trace.h"
#include "planner/device_error.h"
#include "planner/optimizer_estimate.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "planner/split_bounds.h"
#include "planner/step_sequence.h"
#include "simulator/simulator.h"
#include "support/plan_requests.h"
#include "support/synthetic_chain.h"

namespace headroom {
namespace {

using testing::budget_sweep;
using testing::committed;
using testing::kTraces;
using testing::request;

TEST(PlanSearch, SplitsEvenlyWithExactLossWeights) {
  EXPECT_EQ(planner::split_batch(10, 3), (std::vector<std::int64_t>{4, 3, 3}));
  EXPECT_EQ(planner::split_batch(8, 8), (std::vector<std::int64_t>(8, 1)));
  core::Plan plan;
  plan.global_batch = 10;
  plan.choice.micro_batches = planner::split_batch(10, 3);
  double sum = 0;
  for (std::size_t i = 0; i < plan.choice.micro_batches.size(); ++i) sum += plan.loss_weight(i);
  EXPECT_DOUBLE_EQ(sum, 1.0);
  EXPECT_DOUBLE_EQ(plan.loss_weight(0), 0.4);
}

TEST(PlanSearch, PlansFitAndMoreBudgetIsNeverSlower) {
  for (const auto& name : kTraces) {
    SCOPED_TRACE(name);
    const core::Trace trace = committed(name);
    const std::int64_t batch = 32;
    double previous_rate = 0;
    int planned = 0;
    for (const std::int64_t budget : budget_sweep(trace, batch, 40)) {
      // Micro-batching and checkpointing are searched exactly (every split, the DP); Tempo joins
      // them greedily (TempoNeverMakesAPlanSlower covers it).
      const auto outcome = planner::plan_step(trace, request(budget, batch, "mbp,checkpoint"));
      if (!outcome.plan) {
        EXPECT_EQ(previous_rate, 0) << "a smaller budget had a plan but " << budget << " has none";
        EXPECT_GT(outcome.smallest_budget, budget);
        continue;
      }
      ++planned;
      const core::Plan& plan = *outcome.plan;
      EXPECT_LE(plan.predicted.peak_bytes, plan.budget_bytes - plan.margin_bytes) << budget;
      EXPECT_EQ(std::accumulate(plan.choice.micro_batches.begin(), plan.choice.micro_batches.end(), std::int64_t{0}), batch);
      EXPECT_GE(plan.predicted.samples_per_second, previous_rate * (1 - 1e-12)) << "budget " << budget;
      previous_rate = plan.predicted.samples_per_second;
    }
    EXPECT_GT(planned, 20);
  }
}

TEST(PlanSearch, SplitsCoverEveryMicroBatchSizeAndTheChosenPlanIsTheFastestThatFits) {
  const core::Trace trace = committed("cpu-bert.json");
  const auto outcome = planner::plan_step(trace, request(300 << 20, 32));
  ASSERT_TRUE(outcome.plan);
  // 32 samples: one candidate per distinct largest micro-batch (32, 16, 11, 8, 7, 6, 5, 4, 3, 2, 1).
  ASSERT_EQ(outcome.splits.size(), 11u);
  EXPECT_EQ(outcome.splits.front().micro_batch, 32);
  EXPECT_EQ(outcome.splits.front().count, 1);
  EXPECT_EQ(outcome.splits.back().micro_batch, 1);
  EXPECT_EQ(outcome.splits.back().count, 32);
  double fastest_fit = 0;
  int feasible = 0, infeasible = 0;
  for (const auto& split : outcome.splits) {
    (split.fits ? feasible : infeasible) += 1;
    if (split.fits) {
      EXPECT_LE(split.predicted.peak_bytes, outcome.plan->budget_bytes - outcome.plan->margin_bytes);
      fastest_fit = std::max(fastest_fit, split.predicted.samples_per_second);
    } else {
      EXPECT_GT(split.predicted.peak_bytes, outcome.plan->budget_bytes - outcome.plan->margin_bytes);
    }
  }
  EXPECT_GT(feasible, 0);
  EXPECT_GT(infeasible, 0);
  EXPECT_DOUBLE_EQ(fastest_fit, outcome.plan->predicted.samples_per_second);
  // Without micro-batching there is one split, the whole batch.
  EXPECT_EQ(planner::plan_step(trace, request(1LL << 34, 32, "none")).splits.size(), 1u);
}

// A margin below the worst error the trace's device showed gets a warning naming it
// (planner/device_error.h). On the CPU the prediction is an upper bound of every profiled step, so
// margin 0 is enough; a device whose allocator reserves more than it hands out (CUDA's reserve,
// here 3% above one step's peak) needs a margin that covers it.
TEST(PlanSearch, AMarginBelowTheDevicesErrorIsWarnedAbout) {
  core::Trace trace = committed("cpu-bert.json");
  const auto has_margin_warning = [](const core::Plan& plan) {
    for (const auto& w : plan.warnings) {
      if (w.rfind("the margin (", 0) == 0) return true;
    }
    return false;
  };
  auto r = request(300 << 20, 32);
  r.margin_fraction = 0;
  auto outcome = planner::plan_step(trace, r);
  ASSERT_TRUE(outcome.plan);
  EXPECT_FALSE(has_margin_warning(*outcome.plan));
  EXPECT_EQ(planner::worst_device_error(core::CostModel(trace), planner::LayerGraph(trace)).fraction, 0);

  auto& step = trace.steps.at(1);
  step.gpu = core::GpuStepCost{};
  step.gpu->peak_reserved_bytes = step.peak_bytes + step.peak_bytes * 3 / 100;
  const auto error = planner::worst_device_error(core::CostModel(trace), planner::LayerGraph(trace));
  EXPECT_EQ(error.batch, step.batch);
  EXPECT_NEAR(error.fraction, 0.03, 1e-4);
  outcome = planner::plan_step(trace, r);
  ASSERT_TRUE(outcome.plan);
  ASSERT_TRUE(has_margin_warning(*outcome.plan));
  EXPECT_NE(outcome.plan->warnings.back().find("(0.0%) is below the worst error measured on this trace's device (3.0"),
            std::string::npos)
      << outcome.plan->warnings.back();
  EXPECT_NE(outcome.plan->warnings.back().find("use --margin 3.0% or more"), std::string::npos) << outcome.plan->warnings.back();
  r.margin_fraction = 0.05;
  outcome = planner::plan_step(trace, r);
  ASSERT_TRUE(outcome.plan);
  EXPECT_FALSE(has_margin_warning(*outcome.plan));
}

TEST(PlanSearch, AnotherOptimizerIsEstimatedAndSaysSo) {
  const core::Trace trace = committed("cpu-bert.json");  // measured with adam: 8 bytes per parameter
  ASSERT_EQ(trace.optimizer.name, "adam");
  const core::Trace sgd = planner::with_estimated_optimizer(trace, "sgd");
  EXPECT_EQ(sgd.optimizer.name, "sgd");
  EXPECT_EQ(sgd.optimizer.state_bytes, trace.param_bytes());  // one fp32 momentum per fp32 parameter
  EXPECT_EQ(sgd.steps.front().static_bytes,
            trace.steps.front().static_bytes - (trace.optimizer.state_bytes - sgd.optimizer.state_bytes));
  // Back to adam: the estimate agrees with what the profiler measured.
  EXPECT_EQ(planner::with_estimated_optimizer(sgd, "adam").optimizer.state_bytes, trace.optimizer.state_bytes);
  EXPECT_THROW(planner::with_estimated_optimizer(trace, "lion"), core::InputError);
  // Made from Python, the step's torch.optim keeps a step count per parameter tensor under adam, none under sgd.
  core::Trace python = trace;
  python.optimizer.torch_optim_tensors = 10;
  python.optimizer.state_bytes += 40;
  EXPECT_EQ(planner::with_estimated_optimizer(python, "sgd").optimizer.state_bytes, sgd.optimizer.state_bytes);
  EXPECT_EQ(planner::with_estimated_optimizer(python, "adam(amsgrad)").optimizer.state_bytes,
            planner::with_estimated_optimizer(trace, "adam(amsgrad)").optimizer.state_bytes + 40);
  // A GPU trace's host rate was adam's: another optimizer's L2L host lane falls back to its time.
  core::Trace gpu = trace;
  gpu.optimizer.host_ns_per_param = 2.5;
  EXPECT_EQ(planner::with_estimated_optimizer(gpu, "sgd").optimizer.host_ns_per_param, 0);

  auto r = request(300 << 20, 32);
  const auto measured = planner::plan_step(trace, r);
  r.optimizer = "adam";
  EXPECT_EQ(planner::plan_step(trace, r).plan, measured.plan);  // the trace's own: nothing changes
  r.optimizer = "sgd";
  const auto estimated = planner::plan_step(trace, r);
  ASSERT_TRUE(estimated.plan && measured.plan);
  EXPECT_EQ(estimated.plan->optimizer, "sgd");
  EXPECT_LT(estimated.plan->predicted.peak_bytes, measured.plan->predicted.peak_bytes);
  ASSERT_FALSE(estimated.plan->warnings.empty());
  EXPECT_EQ(estimated.plan->warnings.back().rfind(
                "optimizer state estimated, not measured: profile with --optimizer sgd to measure it", 0),
            0u)
      << estimated.plan->warnings.back();
  // The plan keeps its optimizer through JSON, and its schedule uses the estimated state.
  EXPECT_EQ(core::plan_from_json(core::to_json(*estimated.plan)), *estimated.plan);
  EXPECT_FALSE(core::to_json(*measured.plan).contains("optimizer"));
  const auto sim = simulator::simulate(planner::plan_schedule(trace, *estimated.plan, "plan"));
  EXPECT_EQ(sim.peak_bytes, estimated.plan->predicted.peak_bytes);
}

TEST(PlanSearch, CheckpointingFitsWhereMicroBatchingAloneCannot) {
  // gpt peaks in the backward of its loss while every block holds its activations, so
  // checkpointing lowers its floor (bert mini peaks in the Adam step, which it cannot lower).
  for (const std::string name : {"cpu-gpt.json"}) {
    SCOPED_TRACE(name);
    const core::Trace trace = committed(name);
    // Below the least that micro-batches of one need, only checkpointing can fit the step.
    const auto alone = planner::plan_step(trace, request(1, 32, "mbp"));
    const auto both = planner::plan_step(trace, request(1, 32, "mbp,checkpoint"));
    ASSERT_LT(both.smallest_budget, alone.smallest_budget);
    const std::int64_t between = (both.smallest_budget + alone.smallest_budget) / 2;
    EXPECT_FALSE(planner::plan_step(trace, request(between, 32, "mbp")).plan);
    const auto plan = planner::plan_step(trace, request(between, 32, "mbp,checkpoint")).plan;
    ASSERT_TRUE(plan);
    EXPECT_FALSE(plan->choice.checkpointed_blocks.empty());
    EXPECT_EQ(plan->strategies, (std::vector<std::string>{"mbp", "checkpoint"}));
    for (const auto& l : plan->choice.layers) {
      if (l.checkpoint) {
        EXPECT_EQ(l.name.rfind("layer", 0), 0u) << l.name;  // only block layers
      }
    }
    // At the smallest budget it names, a plan exists.
    EXPECT_TRUE(planner::plan_step(trace, request(both.smallest_budget, 32)).plan);
  }
}

TEST(PlanSearch, FlagsBatchNormUnderMicroBatching) {
  const core::Trace trace = committed("cpu-cnn.json");
  const core::CostModel costs(trace);
  const auto tight = planner::plan_step(trace, request(costs.static_bytes() * 3, 64, "mbp"));
  ASSERT_TRUE(tight.plan);
  ASSERT_GT(tight.plan->choice.micro_batches.size(), 1u);
  // One warning for all of them, naming the layers and the remedy.
  std::size_t batchnorm_warnings = 0;
  for (const auto& w : tight.plan->warnings) {
    if (w.find("BatchNorm") == std::string::npos) continue;
    ++batchnorm_warnings;
    EXPECT_NE(w.find("9 BatchNorm layers (stem.bn,"), std::string::npos) << w;
    EXPECT_NE(w.find("--batchnorm-eval"), std::string::npos) << w;
  }
  EXPECT_EQ(batchnorm_warnings, 1u);
}

TEST(PlanSearch, StrategyNoneIsTheWholeBatch) {
  const core::Trace trace = committed("cpu-mlp.json");
  const auto outcome = planner::plan_step(trace, request(1LL << 34, 16, "none"));
  ASSERT_TRUE(outcome.plan);
  EXPECT_EQ(outcome.plan->choice.micro_batches, (std::vector<std::int64_t>{16}));
  EXPECT_TRUE(outcome.plan->choice.checkpointed_blocks.empty());
  EXPECT_TRUE(outcome.plan->strategies.empty());
}

TEST(PlanSearch, InfeasibleSaysTheSmallestBudget) {
  const core::Trace trace = committed("cpu-bert.json");
  const core::CostModel costs(trace);
  // Without L2L (which keeps the training state on the host) the state is the floor.
  const std::string on_the_device = "mbp,checkpoint,tempo,infcl";
  const auto below_static = planner::plan_step(trace, request(costs.static_bytes() / 2, 8, on_the_device));
  EXPECT_FALSE(below_static.plan);
  EXPECT_NE(below_static.reason.find("parameters, gradients and optimizer state"), std::string::npos);
  EXPECT_TRUE(planner::plan_step(trace, request(below_static.smallest_budget, 8, on_the_device)).plan) << below_static.reason;
  EXPECT_FALSE(planner::plan_step(trace, request(below_static.smallest_budget - 1, 8, on_the_device)).plan);
  // With no strategies the whole batch must fit; the smallest budget it names is enough.
  const auto none = planner::plan_step(trace, request(costs.static_bytes() * 13 / 10, 64, "none"));
  ASSERT_FALSE(none.plan);
  const auto enough = planner::plan_step(trace, request(none.smallest_budget, 64, "none"));
  EXPECT_TRUE(enough.plan) << none.reason;
}

TEST(PlanSearch, RejectsBadRequests) {
  const core::Trace trace = committed("cpu-mlp.json");
  EXPECT_THROW(planner::plan_step(trace, request(1 << 30, 0)), core::InputError);
  EXPECT_THROW(planner::plan_step(trace, request(0, 8)), core::InputError);
  EXPECT_THROW(planner::plan_step(trace, request(1 << 30, planner::kMaxGlobalBatch + 1)), core::InputError);
  // Past what a plan file holds (the fuzzer's finding: a plan written that its reader refused).
  EXPECT_THROW(planner::plan_step(trace, request(core::kMaxPlanBudget + 1, 8)), core::InputError);
  EXPECT_TRUE(planner::plan_step(trace, request(core::kMaxPlanBudget, 8)).plan);
  EXPECT_THROW(planner::parse_strategies("mbp,warp"), core::InputError);
  EXPECT_EQ(planner::parse_strategies("l2l"), std::set<planner::Strategy>{planner::Strategy::L2L});
  EXPECT_EQ(planner::parse_strategies("infcl"), std::set<planner::Strategy>{planner::Strategy::InfCl});
  EXPECT_EQ(planner::parse_strategies("tempo"), std::set<planner::Strategy>{planner::Strategy::Tempo});
  EXPECT_THROW(planner::parse_strategies(""), core::InputError);
}

// "all" holds every strategy, so names beside it add nothing ("all,l2l" is all); "none" stands
// alone; with several workers "all" leaves out what does not run with them (L2L).
TEST(PlanSearch, StrategiesAllAndNone) {
  const auto all = planner::parse_strategies("all");
  EXPECT_EQ(all.size(), planner::strategy_table().size());
  EXPECT_TRUE(all.contains(planner::Strategy::L2L));
  EXPECT_EQ(planner::parse_strategies("all,l2l"), all);
  EXPECT_EQ(planner::parse_strategies("mbp,all"), all);
  EXPECT_TRUE(planner::asks_for_all("tempo,all"));
  EXPECT_FALSE(planner::asks_for_all("mbp,l2l"));
  EXPECT_FALSE(planner::parse_strategies("all", 2).contains(planner::Strategy::L2L));
  EXPECT_FALSE(planner::parse_strategies("all,l2l", 2).contains(planner::Strategy::L2L));
  EXPECT_TRUE(planner::parse_strategies("all", 2).contains(planner::Strategy::MicroBatching));
  // Named, L2L stays asked for with several workers: plan_step refuses it there, saying why.
  EXPECT_TRUE(planner::parse_strategies("mbp,l2l", 2).contains(planner::Strategy::L2L));
  EXPECT_TRUE(planner::parse_strategies("none").empty());
  const auto message = [](const std::string& text) {
    try {
      planner::parse_strategies(text);
    } catch (const core::InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("none,mbp"), "strategies: 'none' stands alone (the whole batch, nothing applied), got 'none,mbp'");
  EXPECT_EQ(message("all,none"), "strategies: 'none' stands alone (the whole batch, nothing applied), got 'all,none'");
  EXPECT_EQ(message("all,warp"),
            "strategies: unknown strategy 'warp' (known: mbp, checkpoint, tempo, infcl, l2l, all; or none, alone)");
}

// Found by fuzzing: a trace at the reader's limits (every byte count 16 TiB, every time 4.9 hours,
// a steep last segment) extended to a large batch overflowed int64 in the cost model's
// extrapolation, the scaled layer times and the step's sum of micro-batches. Values past the
// limits are held there and the step's time saturates: the plan is absurd but well-formed.
TEST(PlanSearch, TraceAtTheLimitsPlansWithoutOverflow) {
  core::Trace trace = testing::synthetic_chain(8);
  for (auto& layer : trace.layers) {
    layer.param_bytes = core::kMaxTraceBytes;
    for (auto& s : layer.samples) {
      const bool last = s.batch == trace.batch_sizes.back();
      s.kept_bytes = s.output_bytes = s.fwd_transient_bytes = s.bwd_transient_bytes = last ? core::kMaxTraceBytes : 0;
      s.fwd_retained_bytes = last ? core::kMaxTraceBytes : 0;
      s.bwd_retained_bytes = last ? -core::kMaxTraceBytes : 0;
      s.fwd_ns = s.bwd_ns = last ? core::kMaxTraceNs : 0;
    }
  }
  for (auto& step : trace.steps) step.step_ns = step.batch == trace.batch_sizes.back() ? core::kMaxTraceNs : 1;
  const core::CostModel costs(trace);
  const auto far = costs.layer(0, planner::kMaxGlobalBatch);
  EXPECT_EQ(far.kept_bytes, core::kMaxTraceBytes);
  EXPECT_EQ(far.fwd_ns, core::kMaxTraceNs);
  EXPECT_EQ(costs.micro_batch_ns(planner::kMaxGlobalBatch), core::kMaxTraceNs);
  for (const std::int64_t batch : {std::int64_t{64}, planner::kMaxGlobalBatch}) {
    // Every layer keeps 16 TiB: nothing fits the largest budget a plan may hold, and weighing every
    // split and bisecting the least budget overflow nothing on the way.
    const auto outcome = planner::plan_step(trace, request(core::kMaxPlanBudget, batch, "mbp"));
    EXPECT_FALSE(outcome.plan);
    EXPECT_EQ(outcome.smallest_budget, 0);
    EXPECT_NE(outcome.reason.find("more than the 16.0 TiB a plan may hold"), std::string::npos) << outcome.reason;
    for (const auto& split : outcome.splits) {
      EXPECT_GT(split.predicted.peak_bytes, costs.static_bytes()) << split.count;
      EXPECT_GT(split.predicted.step_seconds, 0) << split.count;
      EXPECT_TRUE(std::isfinite(split.predicted.samples_per_second)) << split.count;
    }
  }
}

// Found by fuzzing: where the layers and the optimizer measured 0 ns the step was predicted to take
// 0 ns, its samples/s was infinite, and the plan file held null there, which the plan reader refused.
TEST(PlanSearch, StepOfLayersThatMeasuredNoTimeStillTakesTime) {
  core::Trace trace = testing::synthetic_chain(8);
  for (auto& layer : trace.layers) {
    for (auto& s : layer.samples) s.fwd_ns = s.bwd_ns = 0;
  }
  for (auto& step : trace.steps) step.optimizer_ns = 0;
  const auto outcome = planner::plan_step(trace, request(std::int64_t{1} << 40, 8));
  ASSERT_TRUE(outcome.plan) << outcome.reason;
  EXPECT_TRUE(std::isfinite(outcome.plan->predicted.samples_per_second));
  const auto written = nlohmann::json::parse(core::to_json(*outcome.plan).dump());
  EXPECT_EQ(core::plan_from_json(written), *outcome.plan);
}

// A model whose last block is its last layer (no head after it) plans and simulates too.
TEST(PlanSearch, ChainWithoutLayersAfterTheLastBlock) {
  const core::Trace trace = testing::synthetic_chain(40);
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const auto least = planner::plan_step(trace, request(1, 16, "mbp,checkpoint"));
  const auto without = planner::plan_step(trace, request(1, 16, "mbp"));
  ASSERT_LT(least.smallest_budget, without.smallest_budget);
  const auto plan =
      planner::plan_step(trace, request((least.smallest_budget + without.smallest_budget) / 2, 16, "mbp,checkpoint")).plan;
  ASSERT_TRUE(plan);
  EXPECT_FALSE(plan->choice.checkpointed_blocks.empty());
  const auto sim = simulator::simulate(planner::build_schedule(costs, graph, plan->choice));
  EXPECT_EQ(sim.peak_bytes, plan->predicted.peak_bytes);
}

// The bounded search (planner/split_bounds.h): past a few dozen splits plan_step weighs only the
// splits that may be chosen, named or charted, setting ranges of micro-batch sizes aside by lower
// bounds. Its plans must be those of weighing every split.
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
    // Tempo with the others (what "all" weighs first; L2L, weighed only where nothing
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


// A trace whose timings resolve a micro-batch's median to `error` at every size.
core::Trace with_micro_batch_error(core::Trace trace, double error) {
  for (auto* steps : {&trace.steps, &trace.tempo_steps}) {
    for (auto& step : *steps) step.sequence->micro_batch_error = error;
  }
  return trace;
}

// bert with a fixed cost per micro-batch (half a micro-batch of 16's time): fewer, larger
// micro-batches with checkpointing then run about as fast as smaller ones without.
core::Trace bert_with_micro_batch_overhead() {
  core::Trace trace = committed("cpu-bert.json");
  const std::int64_t overhead = trace.steps.back().sequence->micro_batch_ns / 2;
  for (auto& step : trace.steps) {
    step.sequence->micro_batch_ns += overhead;
    step.sequence->first_micro_batch_ns += overhead;
  }
  return trace;
}

// Plans closer in speed than the trace resolves are a tie, taken for the least recompute, then the
// larger micro-batches: every runner-up faster than the chosen plan is within the resolution of it
// and checkpoints more blocks, or as many with micro-batches no larger; where the trace records no
// error, none is faster. Some budgets' plans change.
TEST(PlanSearch, SpeedsTheTraceCannotTellApartAreTakenForTheLeastRecomputeThenTheLargerMicroBatches) {
  int changed = 0;
  for (const double error : {0.0, 0.05}) {
    const core::Trace trace = with_micro_batch_error(bert_with_micro_batch_overhead(), error);
    const double resolution = planner::timing_resolution(trace);
    EXPECT_NEAR(resolution, 2 * std::sqrt(2.0) * error, 1e-12);
    for (const std::int64_t budget : budget_sweep(trace, 64, 12)) {
      const auto outcome = planner::plan_step(trace, request(budget, 64, "mbp,checkpoint"));
      if (!outcome.plan) continue;
      const core::Plan& plan = *outcome.plan;
      SCOPED_TRACE("error " + std::to_string(error) + " budget " + std::to_string(budget));
      double fastest = plan.predicted.samples_per_second;
      for (const auto& up : plan.runner_ups) {
        fastest = std::max(fastest, up.predicted.samples_per_second);
        if (up.predicted.samples_per_second <= plan.predicted.samples_per_second) continue;
        const int checkpointed = static_cast<int>(plan.choice.checkpointed_blocks.size());
        EXPECT_GE(up.checkpointed_blocks, checkpointed);
        if (up.checkpointed_blocks == checkpointed) EXPECT_LE(up.micro_batch, plan.choice.micro_batches.front());
        EXPECT_NE(up.verdict.find("faster by less than the trace resolves"), std::string::npos) << up.verdict;
      }
      EXPECT_GE(plan.predicted.samples_per_second, fastest * (1 - resolution));
      if (fastest > plan.predicted.samples_per_second) {
        EXPECT_GT(error, 0.0);
        ++changed;
        EXPECT_NE(plan.binding_constraint.find("less than the trace's timings resolve"), std::string::npos)
            << plan.binding_constraint;
      }
    }
  }
  EXPECT_GT(changed, 0);
}

// A micro-batch's times are read between the profiled sizes on either side of it (along the last
// segment past the largest), and are as far off as the worse of the two.
TEST(PlanSearch, AMicroBatchsTimingErrorIsTheWorseOfTheSizesItIsReadBetween) {
  core::Trace trace = committed("cpu-bert.json");  // profiled at 1, 2, 4, 8, 16
  const std::vector<double> errors{0.30, 0.01, 0.02, 0.05, 0.03};
  for (std::size_t i = 0; i < errors.size(); ++i) trace.steps[i].sequence->micro_batch_error = errors[i];
  EXPECT_EQ(planner::micro_batch_error_at(trace, 1), 0.30);
  EXPECT_EQ(planner::micro_batch_error_at(trace, 2), 0.01);
  EXPECT_EQ(planner::micro_batch_error_at(trace, 3), 0.02);
  EXPECT_EQ(planner::micro_batch_error_at(trace, 8), 0.05);
  EXPECT_EQ(planner::micro_batch_error_at(trace, 12), 0.05);
  EXPECT_EQ(planner::micro_batch_error_at(trace, 16), 0.03);
  EXPECT_EQ(planner::micro_batch_error_at(trace, 40), 0.05);
  EXPECT_NEAR(planner::timing_resolution(0.03, 0.04), 0.10, 1e-12);
  EXPECT_NEAR(planner::timing_resolution(trace), 2 * std::sqrt(2.0) * 0.30, 1e-12);
  EXPECT_EQ(planner::micro_batch_error_at(committed("cpu-bert.json"), 12), 0.0);  // recorded before the errors were
}

// The bounded search weighs every split that may tie with the fastest: it plans as weighing every
// split does where the trace's timings resolve speeds coarsely (to 14%, as a shared 2-core machine's
// profile of a few seconds of timing rounds does).
TEST(PlanSearch, BoundedSearchPlansAsWeighingEverySplitWithTies) {
  SearchTally tally;
  for (const char* name : {"cpu-bert.json", "cpu-gpt.json"}) {
    expect_bounded_search_as_every_split(with_micro_batch_error(committed(name), 0.05), name, {300, 1500}, tally);
  }
  expect_bounded_search_as_every_split(with_micro_batch_error(bert_with_micro_batch_overhead(), 0.05), "bert with an overhead",
                                       {300, 1500}, tally);
  EXPECT_GT(tally.bounded, tally.compared * 3 / 4);
}

}  // namespace
}  // namespace headroom
