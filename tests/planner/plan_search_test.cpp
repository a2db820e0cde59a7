#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "core/cost_model.h"
#include "core/errors.h"
#include "support/expand_repeats.h"
#include "planner/checkpoint_dp.h"
#include "planner/device_error.h"
#include "planner/optimizer_estimate.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "support/random_chain.h"
#include "simulator/simulator.h"
#include "support/synthetic_chain.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

core::Trace committed(const std::string& name) {
  return core::read_trace_file(fs::path(HEADROOM_TRACES_DIR) / name);
}

const std::vector<std::string> kTraces = {"cpu-mlp.json", "cpu-cnn.json", "cpu-bert.json", "cpu-gpt.json", "cpu-clip.json"};

// The planner's model of a plain step (one micro-batch, nothing applied) reproduces the peak the
// profiler measured at every sampled size.
TEST(MemoryModel, ReproducesMeasuredPeaks) {
  for (const auto& name : kTraces) {
    const core::Trace trace = committed(name);
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    for (std::size_t k = 0; k < trace.batch_sizes.size(); ++k) {
      const auto p = planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({trace.batch_sizes[k]}));
      const double measured = static_cast<double>(trace.steps[k].peak_bytes);
      EXPECT_NEAR(static_cast<double>(p.peak_bytes) / measured, 1.0, 1e-3) << name << " batch " << trace.batch_sizes[k];
      // One micro-batch as the trace measured it (the profiled step less its optimizer, or the
      // sequence's micro-batch in traces that have one) plus what a step pays once; each layer's
      // scaled time is rounded to a nanosecond.
      EXPECT_NEAR(p.step_ns, costs.micro_batch_ns(trace.batch_sizes[k]) + costs.optimizer_ns(),
                  static_cast<double>(trace.layers.size())) << name;
    }
  }
}

TEST(LayerGraph, FindsSkipEdgesAndCheckpointableBlocks) {
  const core::Trace trace = committed("cpu-bert.json");
  const planner::LayerGraph graph(trace);
  EXPECT_EQ(graph.blocks().size(), 4u);
  for (const auto& block : graph.blocks()) {
    EXPECT_TRUE(block.checkpointable) << block.why_not;
    // The block input is read by the qkv projection and by the residual add (a skip edge).
    EXPECT_GE(graph.readers(block.input).size(), 2u);
  }
  std::vector<int> order(trace.layers.size());
  std::iota(order.begin(), order.end(), 0);
  EXPECT_EQ(graph.topological_order(), order);
  EXPECT_EQ(graph.last_reader(static_cast<int>(trace.layers.size()) - 1), -1);
}

// Where a standard step lets go of the gradient arriving at a block's output, which a checkpointed
// block's backward holds to its end instead: post-LN bert's blocks end in a LayerNorm, whose
// backward takes it; pre-LN gpt's in a residual add, which hands it on to the residual stream, where
// the second LayerNorm's gradient is added to it in place; the cnn's in a ReLU.
TEST(LayerGraph, FindsWhereABlocksOutputGradientIsLetGo) {
  const auto name_of = [](const core::Trace& trace, int layer) { return trace.layers[static_cast<std::size_t>(layer)].name; };
  const core::Trace bert = committed("cpu-bert.json");
  const planner::LayerGraph bert_graph(bert);
  for (const auto& block : bert_graph.blocks()) {
    EXPECT_EQ(block.output_gradient_released_by, block.last) << name_of(bert, block.last);
  }
  const core::Trace gpt = committed("cpu-gpt.json");
  const planner::LayerGraph gpt_graph(gpt);
  ASSERT_EQ(gpt_graph.blocks().size(), 2u);
  for (const auto& block : gpt_graph.blocks()) {
    const std::string prefix = "layer" + std::to_string(block.block);
    EXPECT_EQ(name_of(gpt, block.last), prefix + ".ffn_residual");
    EXPECT_EQ(name_of(gpt, block.output_gradient_released_by), prefix + ".ln2");
  }
  const core::Trace cnn = committed("cpu-cnn.json");
  const planner::LayerGraph cnn_graph(cnn);
  for (const auto& block : cnn_graph.blocks()) {
    EXPECT_EQ(block.output_gradient_released_by, block.last) << name_of(cnn, block.last);
  }
}

// Random chains of up to 12 stages with integer sizes: the DP (unit 1, so exact) and trying every
// subset agree on feasibility and recompute time, and the DP's peak is what its choice gives.
TEST(CheckpointDp, EqualsExhaustiveSearch) {
  std::mt19937 rng(42);
  int feasible = 0;
  for (int round = 0; round < 400; ++round) {
    const planner::Chain chain = testing::random_chain(rng);
    const auto n = static_cast<std::int64_t>(chain.stages.size());
    const std::int64_t limit = testing::draw(rng, chain.base, chain.base + 40 * n);
    const auto dp = planner::solve_checkpoint_dp(chain, limit, 1);
    const auto brute = planner::solve_checkpoint_exhaustive(chain, limit);
    ASSERT_EQ(dp.feasible, brute.feasible) << "round " << round;
    if (!dp.feasible) continue;
    ++feasible;
    EXPECT_EQ(dp.recompute_ns, brute.recompute_ns) << "round " << round;
    EXPECT_EQ(dp.peak_bytes, planner::chain_peak(chain, dp.checkpoint));
    EXPECT_LE(dp.peak_bytes, limit);
    if (dp.checkpoint == brute.checkpoint) {
      EXPECT_EQ(dp.peak_bytes, brute.peak_bytes);
    }
  }
  EXPECT_GT(feasible, 100);  // the rounds exercise the interesting cases, not only infeasible ones
}

TEST(CheckpointDp, CoarseUnitsStayWithinTheLimit) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    planner::Chain chain;
    chain.base = 1000;
    for (int k = 0; k < 10; ++k) {
      const std::int64_t stored = std::uniform_int_distribution<std::int64_t>(100, 900)(rng);
      chain.stages.push_back({stored, stored / 5, stored + 333, stored + 400, 10 + k, true});
    }
    const std::int64_t limit = std::uniform_int_distribution<std::int64_t>(2000, 9000)(rng);
    const auto dp = planner::solve_checkpoint_dp(chain, limit, 97);
    if (dp.feasible) {
      EXPECT_LE(planner::chain_peak(chain, dp.checkpoint), limit);
    }
    // Rounding can only cost optimality, never admit a plan the exact DP would reject.
    const auto exact = planner::solve_checkpoint_dp(chain, limit, 1);
    if (dp.feasible) {
      EXPECT_TRUE(exact.feasible);
      EXPECT_GE(dp.recompute_ns, exact.recompute_ns);
    }
  }
}

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

planner::PlanRequest request(std::int64_t budget, std::int64_t batch, const std::string& strategies = "all") {
  planner::PlanRequest r;
  r.budget_bytes = budget;
  r.global_batch = batch;
  r.strategies = planner::parse_strategies(strategies);
  r.trace_path = "traces/x.json";
  r.trace_sha256 = std::string(64, '0');
  return r;
}

// Budgets from the static floor up to the whole batch's need, for each committed trace.
std::vector<std::int64_t> budget_sweep(const core::Trace& trace, std::int64_t batch, int points) {
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const std::int64_t lo = costs.static_bytes() + costs.optimizer_transient_bytes();
  // Up to past what the whole batch needs once the 5% margin is taken off.
  const std::int64_t hi =
      planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({batch})).peak_bytes * 23 / 20;
  std::vector<std::int64_t> budgets;
  for (int i = 0; i <= points; ++i) budgets.push_back(lo + (hi - lo) * i / points);
  return budgets;
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
  // Without L2L (whose relay keeps the training state on the host) the state is the floor.
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

TEST(LayerGraph, RejectsABlockThatComesBack) {
  core::Trace trace = testing::synthetic_chain(12);
  trace.layers[9].block = 0;  // blocks 0,0,0,0,1,1,1,1,2,0,2,2
  EXPECT_THROW(planner::LayerGraph{trace}, core::InputError);
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

// The planner's numbers and the simulator's agree for the same plan.
TEST(Simulator, AgreesWithThePlanner) {
  for (const auto& name : kTraces) {
    SCOPED_TRACE(name);
    const core::Trace trace = committed(name);
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    for (const std::int64_t budget : budget_sweep(trace, 24, 8)) {
      const auto outcome = planner::plan_step(trace, request(budget, 24));
      if (!outcome.plan) continue;
      planner::check_choice(*outcome.plan, trace, name);
      const auto schedule = planner::build_schedule(costs, graph, outcome.plan->choice);
      const auto sim = simulator::simulate(schedule);
      EXPECT_EQ(sim.peak_bytes, outcome.plan->predicted.peak_bytes) << budget;
      EXPECT_NEAR(static_cast<double>(sim.makespan_ns) / 1e9, outcome.plan->predicted.step_seconds, 1e-9);
      // Memory returns to the resident state after the step: on the device, all of it, but under
      // L2L (the lowest budgets, where "all" relays) what the relay keeps there.
      if (outcome.plan->choice.l2l) {
        EXPECT_LT(sim.memory.back().total(), costs.static_bytes()) << budget;
      } else {
        EXPECT_EQ(sim.memory.back().total(), costs.static_bytes()) << budget;
      }
    }
  }
}

// One sequence makes both the prediction and the schedule: runs of one micro-batch size share
// their ops, the last micro-batch keeps its input through the optimizer step, and the schedule has
// one task per layer op of every segment, a run of one size repeated.
TEST(StepSequence, PredictionAndScheduleShareIt) {
  const core::Trace trace = committed("cpu-bert.json");
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  auto choice = core::StepChoice{}.with_micro_batches({3, 3, 3, 2, 2});
  choice.checkpointed_blocks = {graph.blocks().front().block};
  const auto seq = planner::step_sequence(costs, graph, choice);
  ASSERT_EQ(seq.segments.size(), 4u);  // 3 x3, 1 x2, the last 2, the optimizer
  EXPECT_EQ(seq.segments[0].repeat, 3);
  EXPECT_EQ(seq.segments[1].repeat, 1);
  EXPECT_EQ(seq.segments[1].ops, seq.segments[2].ops);
  EXPECT_TRUE(seq.segments[2].keeps_input);
  EXPECT_EQ(seq.segments[2].first, 4);
  EXPECT_EQ(seq.segments[3].batch, 0);
  EXPECT_EQ(seq.ops.size(), 3u);  // two sizes and the optimizer

  const auto schedule = planner::build_schedule(costs, graph, choice);
  std::int64_t layer_ops = 0, segment_layer_ops = 0;
  for (const auto& segment : seq.segments) {
    for (const auto& op : seq.ops[segment.ops]) {
      layer_ops += segment.repeat * (op.layer >= 0);
      segment_layer_ops += op.layer >= 0;
    }
  }
  EXPECT_EQ(simulator::tasks_run(schedule), layer_ops + 1);
  EXPECT_EQ(static_cast<std::int64_t>(schedule.tasks.size()), segment_layer_ops + 1);
  const int per_micro_batch = static_cast<int>(segment_layer_ops / 3);
  EXPECT_EQ(schedule.repeats, std::vector<core::Repeat>{(core::Repeat{0, per_micro_batch, 3})});
  EXPECT_EQ(schedule.samples, 13);
  const auto predicted = planner::predict_step(costs, graph, choice);
  const auto sim = simulator::simulate(schedule);
  EXPECT_EQ(sim.peak_bytes, predicted.peak_bytes);
  EXPECT_EQ(sim.makespan_ns, predicted.step_ns);
  EXPECT_EQ(sim.memory.back().total(), costs.static_bytes());
}

// n identical micro-batches cost what one does: the schedule is one micro-batch's tasks with a
// repeat count, and the simulated step peaks as one micro-batch does and takes n times its time
// plus the optimizer's, exactly, as the planner predicts.
TEST(StepSequence, IdenticalMicroBatchesAreOneRepeatedSegment) {
  const core::Trace trace = committed("cpu-bert.json");
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  auto choice = graph.all_lean();
  choice.checkpointed_blocks = {graph.blocks().front().block};
  const auto schedule_of = [&](std::size_t n) {
    return planner::build_schedule(costs, graph, choice.with_micro_batches(std::vector<std::int64_t>(n, 5)));
  };
  const auto one = schedule_of(1), three = schedule_of(3), many = schedule_of(20'000);
  EXPECT_EQ(many.tasks.size(), three.tasks.size());
  EXPECT_LE(many.tasks.size(), 2 * one.tasks.size());
  ASSERT_EQ(many.repeats.size(), 1u);
  EXPECT_EQ(many.repeats[0].times, 19'999);  // the last micro-batch keeps its input: a segment of its own
  const auto sim_one = simulator::simulate(one), sim_many = simulator::simulate(many);
  EXPECT_EQ(sim_many.memory.size(), simulator::simulate(three).memory.size());
  EXPECT_EQ(sim_many.peak_bytes, sim_one.peak_bytes);
  const std::int64_t optimizer_ns = one.tasks.back().duration_ns;
  EXPECT_EQ(sim_many.makespan_ns - optimizer_ns, 20'000 * (sim_one.makespan_ns - optimizer_ns));
  EXPECT_EQ(sim_many.repeats[0].period_ns, sim_one.makespan_ns - optimizer_ns);
  const auto predicted = planner::predict_step(costs, graph, choice.with_micro_batches(std::vector<std::int64_t>(20'000, 5)));
  EXPECT_EQ(sim_many.peak_bytes, predicted.peak_bytes);
  EXPECT_EQ(sim_many.makespan_ns, predicted.step_ns);
  EXPECT_EQ(sim_many.memory.back().total(), costs.static_bytes());
}

// Written out micro-batch by micro-batch, as schedules were before repeats, the step simulates the
// same: a split of two sizes, so two repeats.
TEST(StepSequence, RepeatedScheduleSimulatesAsTheWrittenOutOne) {
  const core::Trace trace = committed("cpu-gpt.json");
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  auto choice = core::StepChoice{}.with_micro_batches({4, 4, 4, 4, 3, 3, 3});
  const auto schedule = planner::build_schedule(costs, graph, choice);
  ASSERT_EQ(schedule.repeats.size(), 2u);
  const auto copies = testing::expand_repeats(schedule);
  EXPECT_EQ(static_cast<std::int64_t>(copies.tasks.size()), simulator::tasks_run(schedule));
  const auto repeated = simulator::simulate(schedule), written = simulator::simulate(copies);
  EXPECT_EQ(repeated.peak_bytes, written.peak_bytes);
  EXPECT_EQ(repeated.peak_time_ns, written.peak_time_ns);
  EXPECT_EQ(repeated.makespan_ns, written.makespan_ns);
  const auto& at_peak = schedule.tasks[static_cast<std::size_t>(repeated.peak_task)];
  const auto& written_at_peak = copies.tasks[static_cast<std::size_t>(written.peak_task)];
  EXPECT_EQ(at_peak.name, written_at_peak.name);
  EXPECT_EQ(at_peak.category, written_at_peak.category);
  EXPECT_EQ(at_peak.micro_batch, written_at_peak.micro_batch);
  EXPECT_EQ(repeated.memory.back().bytes, written.memory.back().bytes);
}

// Tempo: with every lean layer on, the planner's model reproduces the peak the profiler measured
// in its all-lean pass, at every sampled size (the frees a lean layer moves included).
TEST(Tempo, ModelReproducesTheLeanPassPeaks) {
  for (const std::string name : {"cpu-bert.json", "cpu-gpt.json"}) {
    const core::Trace trace = committed(name);
    ASSERT_TRUE(trace.has_tempo()) << name;
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    const core::StepChoice lean = graph.all_lean();
    int lean_kinds = 0;
    for (const auto& layer : trace.layers) lean_kinds += layer.tempo.has_value();
    EXPECT_EQ(static_cast<int>(graph.lean_candidates().size()), lean_kinds) << name << ": every lean layer can be chosen alone";
    for (std::size_t k = 0; k < trace.batch_sizes.size(); ++k) {
      const auto p = planner::predict_step(costs, graph, lean.with_micro_batches({trace.batch_sizes[k]}));
      EXPECT_NEAR(static_cast<double>(p.peak_bytes) / static_cast<double>(trace.tempo_steps[k].peak_bytes), 1.0, 1e-3)
          << name << " batch " << trace.batch_sizes[k];
    }
    // At the largest size Tempo keeps less.
    EXPECT_LT(trace.tempo_steps.back().peak_bytes, trace.steps.back().peak_bytes) << name;
  }
}

// Tempo is a per-layer choice: under a budget between the all-lean need and the standard need it
// makes some layers lean, the plan fits, and the simulator agrees; with room to spare it makes none.
TEST(Tempo, PlannerMakesLayersLeanOnlyAsNeeded) {
  for (const std::string name : {"cpu-bert.json", "cpu-gpt.json"}) {
    SCOPED_TRACE(name);
    const core::Trace trace = committed(name);
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    const std::int64_t batch = trace.batch_sizes.back();
    const std::int64_t standard = planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({batch})).peak_bytes;
    const std::int64_t lean = planner::predict_step(costs, graph, graph.all_lean().with_micro_batches({batch})).peak_bytes;
    ASSERT_LT(lean, standard);
    // A budget whose limit after the 5% margin sits halfway between the two needs.
    const auto budget = static_cast<std::int64_t>(static_cast<double>(lean + standard) / 2 / 0.95);
    EXPECT_FALSE(planner::plan_step(trace, request(budget, batch, "none")).plan);
    const auto outcome = planner::plan_step(trace, request(budget, batch, "tempo"));
    ASSERT_TRUE(outcome.plan) << outcome.reason;
    const core::Plan& plan = *outcome.plan;
    EXPECT_EQ(plan.choice.micro_batches, std::vector<std::int64_t>{batch});
    EXPECT_EQ(plan.strategies, std::vector<std::string>{"tempo"});
    int lean_layers = 0;
    for (const auto& layer : plan.choice.layers) {
      if (layer.variant != core::LayerVariant::Tempo) continue;
      ++lean_layers;
      EXPECT_TRUE(graph.can_be_lean(layer.id)) << layer.name;
    }
    EXPECT_GT(lean_layers, 0);
    EXPECT_LE(lean_layers, static_cast<int>(graph.lean_candidates().size()));
    EXPECT_LE(plan.predicted.peak_bytes, plan.budget_bytes - plan.margin_bytes);
    const auto sim = simulator::simulate(planner::plan_schedule(trace, plan, name));
    EXPECT_EQ(sim.peak_bytes, plan.predicted.peak_bytes);
    // The choices survive the plan file. A plan written before the step choice (a "tempo" flag per
    // layer) reads the same; one from before Tempo (neither) has nothing lean.
    auto document = core::to_json(plan);
    EXPECT_EQ(core::plan_from_json(document), plan);
    auto flagged = document;
    for (auto& layer : flagged["layers"]) {
      layer["tempo"] = layer["variant"] == "tempo";
      layer.erase("variant");
    }
    EXPECT_EQ(core::plan_from_json(flagged), plan);
    for (auto& layer : document["layers"]) layer.erase("variant");
    EXPECT_EQ(core::plan_from_json(document).choice.lean_count(), 0);

    // Enough budget for the standard step: lean only where the lean variant was measured no slower.
    const auto roomy = planner::plan_step(trace, request(standard * 2, batch, "tempo"));
    ASSERT_TRUE(roomy.plan);
    for (const auto& layer : roomy.plan->choice.layers) {
      if (layer.variant != core::LayerVariant::Tempo) continue;
      const auto i = static_cast<std::size_t>(layer.id);
      const auto s = costs.layer(i, batch), l = costs.lean_layer(i, batch);
      EXPECT_LE(l.fwd_ns + l.bwd_ns, s.fwd_ns + s.bwd_ns) << layer.name;
    }
    // Tempo lowers the least budget that fits, with and without the other strategies.
    EXPECT_LT(planner::plan_step(trace, request(1, batch, "tempo")).smallest_budget,
              planner::plan_step(trace, request(1, batch, "none")).smallest_budget);
    EXPECT_LE(planner::plan_step(trace, request(1, batch, "all")).smallest_budget,
              planner::plan_step(trace, request(1, batch, "mbp,checkpoint")).smallest_budget);
  }
}

// Allowing Tempo never makes a plan slower or infeasible: the search without it is part of the
// search with it.
TEST(Tempo, NeverMakesAPlanSlower) {
  for (const std::string name : {"cpu-bert.json", "cpu-gpt.json"}) {
    SCOPED_TRACE(name);
    const core::Trace trace = committed(name);
    int with_tempo = 0;
    for (const std::int64_t budget : budget_sweep(trace, 32, 40)) {
      const auto without = planner::plan_step(trace, request(budget, 32, "mbp,checkpoint"));
      const auto with = planner::plan_step(trace, request(budget, 32, "all"));
      if (!without.plan) {
        EXPECT_LE(with.smallest_budget, without.smallest_budget) << budget;
        continue;
      }
      ASSERT_TRUE(with.plan) << budget;
      EXPECT_LE(with.plan->predicted.peak_bytes, with.plan->budget_bytes - with.plan->margin_bytes);
      EXPECT_GE(with.plan->predicted.samples_per_second, without.plan->predicted.samples_per_second * (1 - 1e-12))
          << budget;
      with_tempo += with.plan->choice.lean_count();
    }
    EXPECT_GT(with_tempo, 0);
  }
}

// A plan that makes a layer lean whose lean variant the trace did not measure is bad input.
TEST(Tempo, LeanFlagOnALayerWithoutAVariantIsRejected) {
  const core::Trace trace = committed("cpu-bert.json");
  const planner::LayerGraph graph(trace);
  auto outcome = planner::plan_step(trace, request(1LL << 40, 4));
  ASSERT_TRUE(outcome.plan);
  core::Plan plan = *outcome.plan;
  int linear = -1;
  for (const auto& layer : trace.layers) {
    if (layer.kind == "linear") {
      linear = layer.id;
      break;
    }
  }
  ASSERT_GE(linear, 0);
  plan.choice.layers[static_cast<std::size_t>(linear)].variant = core::LayerVariant::Tempo;
  try {
    planner::check_choice(plan, trace, "p.json");
    FAIL() << "expected an InputError";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("p.json: $.layers[" + std::to_string(linear) + "].variant"), std::string::npos)
        << e.what();
  }
}

// What the device's libraries keep allocated between steps (a CUDA trace's workspace_bytes:
// cuBLAS's workspaces) is static state: every plan's peak carries it once, its time nothing, and
// the simulated timeline holds it as a band of its own from the first sample to the last.
TEST(MemoryModel, TheLibrariesWorkspaceIsHeldThroughEveryStep) {
  core::Trace trace = committed("cpu-bert.json");
  const planner::LayerGraph graph(trace);
  core::StepChoice plain = core::StepChoice{}.with_micro_batches({8, 8});
  core::StepChoice checkpointed = plain;
  checkpointed.checkpointed_blocks = {0, 1};
  const std::vector<core::StepChoice> choices{plain, checkpointed};
  std::vector<planner::StepPrediction> without;
  for (const auto& choice : choices) without.push_back(planner::predict_step(core::CostModel(trace), graph, choice));
  constexpr std::int64_t kWorkspace = std::int64_t{64} << 20;
  trace.workspace_bytes = kWorkspace;
  const core::CostModel costs(trace);
  EXPECT_EQ(costs.static_bytes(), core::CostModel(committed("cpu-bert.json")).static_bytes() + kWorkspace);
  for (std::size_t c = 0; c < choices.size(); ++c) {
    const auto p = planner::predict_step(costs, graph, choices[c]);
    EXPECT_EQ(p.peak_bytes, without[c].peak_bytes + kWorkspace) << c;
    EXPECT_EQ(p.step_ns, without[c].step_ns) << c;
    const auto sim = simulator::simulate(planner::build_schedule(costs, graph, choices[c]));
    EXPECT_EQ(sim.peak_bytes, p.peak_bytes) << c;
    ASSERT_FALSE(sim.memory.empty());
    for (const auto& sample : sim.memory) {
      EXPECT_EQ(sample.bytes[static_cast<std::size_t>(core::MemoryKind::Workspace)], kWorkspace);
    }
  }
}

}  // namespace
}  // namespace headroom
