// L2L as a planner strategy (planner/l2l_model.h): chosen when it is the only plan that fits, never
// when an ordinary one does, its plan field read back, its schedule simulated to its prediction,
// and the largest model a budget trains with it. Torch-free, on the committed bert trace.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "core/cost_model.h"
#include "core/errors.h"
#include "core/plan.h"
#include "planner/l2l_model.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "simulator/simulator.h"
#include "support/build_paths.h"

namespace headroom {
namespace {

// The committed bert mini trace without the link it measured: copies are free unless a test gives
// them a bandwidth (and no latency, so that a copy's time is its bytes at the bandwidth).
core::Trace bert_trace() {
  core::Trace trace = core::read_trace_file(std::filesystem::path(HEADROOM_TRACES_DIR) / "cpu-bert.json");
  trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = 0;
  trace.device.host_to_device_latency_ns = trace.device.device_to_host_latency_ns = 0;
  return trace;
}

planner::PlanRequest request_for(std::int64_t budget, const std::string& strategies) {
  planner::PlanRequest request;
  request.global_batch = 16;
  request.budget_bytes = budget;
  request.strategies = planner::parse_strategies(strategies);
  request.trace_path = "traces/cpu-bert.json";
  request.trace_sha256 = std::string(64, '0');
  return request;
}

TEST(L2LPlanner, StrategyIsPartOfAllOnOneDevice) {
  EXPECT_TRUE(planner::parse_strategies("all").contains(planner::Strategy::L2L));
  EXPECT_FALSE(planner::parse_strategies("all", 2).contains(planner::Strategy::L2L));
  EXPECT_TRUE(planner::parse_strategies("mbp,l2l").contains(planner::Strategy::L2L));
  EXPECT_TRUE(planner::applies_to(planner::Strategy::L2L, bert_trace()));
}

// "all": below what every other strategy reaches, L2L is the plan and the least
// budget counts it; wherever a plan without it fits, "all" plans exactly as without L2L (so the
// golden "all" plans stay as they were); with several workers it is left out, not refused.
TEST(L2LPlanner, AllUsesL2LOnlyWhereNothingElseFits) {
  const core::Trace trace = bert_trace();
  const std::string others = "mbp,checkpoint,tempo,infcl";
  const auto ordinary = planner::plan_step(trace, request_for(1, others));
  ASSERT_FALSE(ordinary.plan);
  const auto least_all = planner::plan_step(trace, request_for(1, "all"));
  ASSERT_FALSE(least_all.plan);
  EXPECT_LT(least_all.smallest_budget, ordinary.smallest_budget);
  EXPECT_NE(least_all.reason.find("with strategies mbp,checkpoint,tempo,l2l the step needs at least"), std::string::npos)
      << least_all.reason;
  // L2L lifts the floor: the reason no longer says the budget is below the training state.
  EXPECT_EQ(least_all.reason.find("below the parameters, gradients and optimizer state"), std::string::npos)
      << least_all.reason;
  const auto with_l2l = planner::plan_step(trace, request_for(least_all.smallest_budget, "all"));
  ASSERT_TRUE(with_l2l.plan) << with_l2l.reason;
  EXPECT_TRUE(with_l2l.plan->choice.l2l);
  EXPECT_NE(with_l2l.plan->binding_constraint.find("no plan without it fits"), std::string::npos)
      << with_l2l.plan->binding_constraint;
  EXPECT_FALSE(planner::plan_step(trace, request_for(least_all.smallest_budget - 1, "all")).plan);
  for (const double factor : {1.0, 1.3, 3.0}) {
    const auto budget = static_cast<std::int64_t>(static_cast<double>(ordinary.smallest_budget) * factor);
    const auto without = planner::plan_step(trace, request_for(budget, others));
    const auto with = planner::plan_step(trace, request_for(budget, "all"));
    ASSERT_TRUE(without.plan && with.plan);
    EXPECT_EQ(*with.plan, *without.plan) << factor;
  }
  auto parallel = request_for(ordinary.smallest_budget / 2, "all");
  parallel.strategies = planner::parse_strategies("all", 2);
  parallel.workers = 2;
  parallel.link = {1e9, 1000, "given"};
  EXPECT_FALSE(planner::plan_step(trace, parallel).plan);
}

// Named without l2l, an infeasible request learns the least budget L2L would need too.
TEST(L2LPlanner, LeastBudgetWithL2LAsWell) {
  const core::Trace trace = bert_trace();
  const auto request = request_for(1, "mbp,checkpoint");
  const auto without = planner::plan_step(trace, request);
  ASSERT_FALSE(without.plan);
  const std::int64_t with_l2l = planner::least_budget_with_l2l(trace, request, without, 0);
  EXPECT_EQ(with_l2l, planner::plan_step(trace, request_for(1, "mbp,checkpoint,l2l")).smallest_budget);
  EXPECT_LT(with_l2l, without.smallest_budget);
  // Nothing to add where L2L was asked for, nothing was ("none"), or L2L cannot run the model.
  const auto asked = request_for(1, "mbp,l2l");
  EXPECT_EQ(planner::least_budget_with_l2l(trace, asked, planner::plan_step(trace, asked), 0), 0);
  const auto none = request_for(1, "none");
  EXPECT_EQ(planner::least_budget_with_l2l(trace, none, planner::plan_step(trace, none), 0), 0);
  const core::Trace cnn = core::read_trace_file(std::filesystem::path(HEADROOM_TRACES_DIR) / "cpu-cnn.json");
  EXPECT_EQ(planner::least_budget_with_l2l(cnn, request, planner::plan_step(cnn, request), 0), 0);
  // A host too small for the training state: L2L needs no less.
  EXPECT_EQ(planner::least_budget_with_l2l(trace, request, without, 1 << 20), 0);
}

// Below what micro-batching and checkpointing can reach, only L2L fits; it is then the plan,
// with its device peak under the limit and the host holding the training state.
TEST(L2LPlanner, ChosenWhenNothingElseFits) {
  const core::Trace trace = bert_trace();
  const auto ordinary = planner::plan_step(trace, request_for(1, "mbp,checkpoint"));
  ASSERT_FALSE(ordinary.plan);
  const std::int64_t least_ordinary = ordinary.smallest_budget;
  // Half of what the ordinary plans need at least: still room for L2L's two stages.
  const auto outcome = planner::plan_step(trace, request_for(least_ordinary / 2, "mbp,checkpoint,l2l"));
  ASSERT_FALSE(planner::plan_step(trace, request_for(least_ordinary / 2, "mbp,checkpoint")).plan);
  ASSERT_TRUE(outcome.plan) << outcome.reason;
  const core::Plan& plan = *outcome.plan;
  ASSERT_TRUE(plan.choice.l2l);
  EXPECT_TRUE(plan.choice.checkpointed_blocks.empty());
  EXPECT_NE(std::find(plan.strategies.begin(), plan.strategies.end(), "l2l"), plan.strategies.end());
  EXPECT_LE(plan.predicted.peak_bytes, plan.budget_bytes - plan.margin_bytes);
  const core::CostModel costs(trace);
  EXPECT_LT(plan.predicted.peak_bytes, costs.static_bytes()) << "the device holds less than the model's training state";
  bool noted = false;
  for (const auto& w : plan.warnings) noted |= w.rfind("L2L:", 0) == 0;
  EXPECT_TRUE(noted);
  EXPECT_NE(plan.binding_constraint.find("they run as L2L (boundaries on the"), std::string::npos) << plan.binding_constraint;
  // The least budget the search names when nothing fits takes L2L into account.
  const auto too_small = planner::plan_step(trace, request_for(1, "mbp,checkpoint,l2l"));
  ASSERT_FALSE(too_small.plan);
  EXPECT_LT(too_small.smallest_budget, least_ordinary);
  EXPECT_TRUE(planner::plan_step(trace, request_for(too_small.smallest_budget, "mbp,checkpoint,l2l")).plan);
  EXPECT_FALSE(planner::plan_step(trace, request_for(too_small.smallest_budget - 1, "mbp,checkpoint,l2l")).plan);
}

// L2L is weighed only where no ordinary plan fits: where one does, allowing L2L changes the
// plan in nothing.
TEST(L2LPlanner, NotChosenWhereAnOrdinaryPlanFits) {
  const core::Trace trace = bert_trace();
  const std::int64_t least = planner::plan_step(trace, request_for(1, "mbp,checkpoint")).smallest_budget;
  for (const double factor : {1.0, 1.5, 3.0}) {
    const auto budget = static_cast<std::int64_t>(static_cast<double>(least) * factor);
    const auto without = planner::plan_step(trace, request_for(budget, "mbp,checkpoint"));
    const auto with = planner::plan_step(trace, request_for(budget, "mbp,checkpoint,l2l"));
    ASSERT_TRUE(without.plan && with.plan);
    EXPECT_EQ(without.plan->choice, with.plan->choice);
    EXPECT_EQ(without.plan->predicted, with.plan->predicted);
    EXPECT_EQ(without.plan->warnings, with.plan->warnings);
    EXPECT_EQ(*without.plan, *with.plan);  // its explanation and runner-ups too
  }
}

// Where the host cannot hold the training state, L2L is not a plan.
TEST(L2LPlanner, HostMemoryBoundsL2L) {
  const core::Trace trace = bert_trace();
  const std::int64_t least = planner::plan_step(trace, request_for(1, "mbp,checkpoint")).smallest_budget;
  auto request = request_for(least / 2, "mbp,checkpoint,l2l");
  request.host_memory_bytes = core::CostModel(trace).static_bytes() / 2;
  EXPECT_FALSE(planner::plan_step(trace, request).plan);
  request.host_memory_bytes = -1;
  EXPECT_THROW(planner::plan_step(trace, request), core::InputError);
  auto parallel = request_for(least / 2, "mbp,l2l");
  parallel.workers = 2;
  parallel.link = {1e9, 1000, "given"};
  EXPECT_THROW(planner::plan_step(trace, parallel), core::InputError);
}

TEST(L2LPlanner, PlanFieldReadsBack) {
  const core::Trace trace = bert_trace();
  const std::int64_t least = planner::plan_step(trace, request_for(1, "mbp,checkpoint")).smallest_budget;
  const auto outcome = planner::plan_step(trace, request_for(least / 2, "mbp,l2l"));
  ASSERT_TRUE(outcome.plan);
  for (const bool on_host : {false, true}) {
    core::Plan plan = *outcome.plan;
    plan.choice.l2l = core::L2LChoice{on_host};
    const auto json = core::to_json(plan);
    EXPECT_EQ(json.at("l2l").at("boundaries"), on_host ? "host" : "device");
    EXPECT_EQ(core::plan_from_json(json), plan);
  }
  core::Plan plain = *outcome.plan;
  plain.choice.l2l.reset();
  EXPECT_FALSE(core::to_json(plain).contains("l2l"));
  // From a chosen block on: written only when set.
  core::Plan later = *outcome.plan;
  later.choice.l2l = core::L2LChoice{false, 1};
  EXPECT_EQ(core::to_json(later).at("l2l").at("from_block"), 1);
  EXPECT_EQ(core::plan_from_json(core::to_json(later)), later);
  later.choice.l2l = core::L2LChoice{true};
  EXPECT_FALSE(core::to_json(later).at("l2l").contains("from_block"));
}

// From a chosen block on: the stages before it stay on the device with their parameters and
// optimizer state, so the host holds and the links carry exactly their share less; the simulator
// still reproduces the planner's walk, with no copies for the kept stages and their optimizer
// step on the device.
TEST(L2LPlanner, FromABlockOnKeepsTheEarlierStagesOnTheDevice) {
  core::Trace trace = bert_trace();
  trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = 1e9;
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const auto stages = planner::l2l_stage_costs(trace);
  std::int64_t total = 0;
  for (const auto& stage : stages) total += stage.parameter_bytes;
  for (const bool on_host : {false, true}) {
    core::StepChoice choice;
    choice.micro_batches = {6, 5, 5};
    choice.l2l = core::L2LChoice{on_host};
    const auto whole = planner::predict_l2l_step(costs, graph, choice.micro_batches, *choice.l2l);
    EXPECT_EQ(whole.kept_stages, 0);
    EXPECT_EQ(whole.kept_bytes, 0);
    std::int64_t kept = 0;
    int tried = 0;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const int block = trace.layers[static_cast<std::size_t>(stages[s].first)].block;
      if (s > 0) kept += stages[s - 1].parameter_bytes;
      if (block < 0 || s == 0) continue;
      ++tried;
      choice.l2l = core::L2LChoice{on_host, block};
      const auto p = planner::predict_l2l_step(costs, graph, choice.micro_batches, *choice.l2l);
      const std::int64_t state = std::llround(static_cast<double>(costs.optimizer_state_bytes()) * static_cast<double>(kept) /
                                              static_cast<double>(total));
      EXPECT_EQ(p.kept_stages, static_cast<int>(s));
      EXPECT_EQ(p.kept_bytes, kept + state);
      // The host no longer holds the kept stages' parameters and optimizer state (nor, when the
      // stage stepping at the host's peak is one of them, its gradients and step temporaries); it
      // still holds the offloaded stages'.
      EXPECT_LE(p.host_bytes, whole.host_bytes - kept - state) << "block " << block;
      EXPECT_GE(p.host_bytes, total - kept + costs.optimizer_state_bytes() - state) << "block " << block;
      EXPECT_EQ(p.copy_bytes, whole.copy_bytes - 3 * kept) << "block " << block;
      EXPECT_LT(p.copy_ns, whole.copy_ns);
      EXPECT_GE(p.device_peak_bytes, kept + state);
      const auto schedule = planner::build_schedule(costs, graph, choice);
      const auto sim = simulator::simulate(schedule);
      EXPECT_EQ(sim.peak_bytes, p.device_peak_bytes) << "block " << block << ", boundaries on host " << on_host;
      EXPECT_EQ(sim.makespan_ns, p.step_ns) << "block " << block;
      EXPECT_EQ(sim.memory.back().total(), 0);
      int prefetches = 0, device_steps = 0;
      for (const auto& task : schedule.tasks) {
        prefetches += task.category == "prefetch";
        device_steps += task.category == "optimizer" && task.stream == core::Stream::Compute;
      }
      const int offloaded = static_cast<int>(stages.size() - s);
      EXPECT_EQ(prefetches, 2 * offloaded - 1);
      EXPECT_EQ(device_steps, static_cast<int>(s));
    }
    EXPECT_GE(tried, 2);
  }
}

// Where the copies are slow, keeping the first stages on the device is faster, and the search
// keeps as many as fit; where copies are free the whole model offloaded is kept (a tie: it leaves
// the device the most room).
TEST(L2LPlanner, SearchKeepsStagesOnTheDeviceWhereCopiesCost) {
  core::Trace trace = bert_trace();
  const std::int64_t least = planner::plan_step(trace, request_for(1, "mbp")).smallest_budget;
  const auto free_copies = planner::plan_step(trace, request_for(least - 1, "mbp,l2l"));
  ASSERT_TRUE(free_copies.plan && free_copies.plan->choice.l2l) << free_copies.reason;
  EXPECT_TRUE(free_copies.plan->choice.l2l->whole_model());
  trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = 1e7;
  const auto slow = planner::plan_step(trace, request_for(least - 1, "mbp,l2l"));
  ASSERT_TRUE(slow.plan && slow.plan->choice.l2l) << slow.reason;
  const core::L2LChoice chosen = *slow.plan->choice.l2l;
  ASSERT_FALSE(chosen.whole_model());
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const auto& micro = slow.plan->choice.micro_batches;
  const auto p = planner::predict_l2l_step(costs, graph, micro, chosen);
  EXPECT_LT(p.step_ns, planner::predict_l2l_step(costs, graph, micro, core::L2LChoice{chosen.boundaries_on_host}).step_ns);
  EXPECT_LE(p.device_peak_bytes, slow.plan->budget_bytes - slow.plan->margin_bytes);
  // No later block that fits is faster.
  for (const auto& stage : planner::l2l_stage_costs(trace)) {
    const int block = trace.layers[static_cast<std::size_t>(stage.first)].block;
    if (block <= chosen.from_block) continue;
    const auto q = planner::predict_l2l_step(costs, graph, micro, core::L2LChoice{chosen.boundaries_on_host, block});
    if (q.device_peak_bytes <= slow.plan->budget_bytes - slow.plan->margin_bytes) EXPECT_GE(q.step_ns, p.step_ns) << block;
  }
  bool named = false;
  for (const auto& w : slow.plan->warnings) named |= w.rfind("L2L from block " + std::to_string(chosen.from_block) + " on", 0) == 0;
  EXPECT_TRUE(named);
}

// The simulator's schedule of an L2L step is the planner's walk: same peak to the byte, same time,
// with copies untimed (a trace that measured no bandwidth) and timed, where the constant-memory
// variant's stashed boundaries go to the host and back on the copy lanes.
// The trace's copy latency is paid once per copy: a offloaded stage's parameters cross in one copy
// each time they are loaded and its gradients in one, and in the constant-memory variant each
// boundary tensor crosses on its own. The simulator still reproduces the prediction.
TEST(L2LPlanner, CopyLatencyIsPaidOncePerCopy) {
  core::Trace trace = bert_trace();
  trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = 1e9;
  const std::vector<std::int64_t> micro = {6, 5, 5};
  const auto stages = planner::l2l_stage_costs(trace);
  for (const bool on_host : {false, true}) {
    const auto predict = [&](std::int64_t in_ns, std::int64_t out_ns) {
      trace.device.host_to_device_latency_ns = in_ns;
      trace.device.device_to_host_latency_ns = out_ns;
      const core::CostModel costs(trace);
      const planner::LayerGraph graph(trace);
      core::StepChoice choice;
      choice.micro_batches = micro;
      choice.l2l = core::L2LChoice{on_host};
      const auto p = planner::predict_l2l_step(costs, graph, micro, *choice.l2l);
      const auto sim = simulator::simulate(planner::build_schedule(costs, graph, choice));
      EXPECT_EQ(sim.peak_bytes, p.device_peak_bytes);
      EXPECT_EQ(sim.makespan_ns, p.step_ns);
      return p;
    };
    const auto none = predict(0, 0);
    const auto in = predict(3000, 0);
    const auto out = predict(0, 5000);
    std::int64_t loads = 0, offloads = 0, brought = 0, sent = 0;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      if (stages[s].parameter_bytes > 0) {
        loads += s + 1 < stages.size() ? 2 : 1;  // forward, and backward but for the last (still loaded)
        offloads += 1;
      }
      if (!on_host) continue;
      const auto n = static_cast<std::int64_t>(micro.size());
      brought += n * static_cast<std::int64_t>(stages[s].inputs.size() + stages[s].exports.size());
      sent += n * static_cast<std::int64_t>(stages[s].exports.size() + stages[s].inputs.size());
    }
    EXPECT_EQ(in.copy_ns - none.copy_ns, 3000 * (loads + brought)) << "boundaries on host " << on_host;
    EXPECT_EQ(out.copy_ns - none.copy_ns, 5000 * (offloads + sent)) << "boundaries on host " << on_host;
    EXPECT_EQ(in.stash_copy_ns - none.stash_copy_ns, 3000 * brought);
    EXPECT_GT(in.step_ns, none.step_ns);
  }
}

// One L2L step of `trace` predicted as a CPU trace ([0]) and as a CUDA trace ([1]), each checked
// against its simulated schedule.
struct CpuAndCuda {
  planner::L2LPrediction predicted[2];
  std::vector<planner::L2LOp> ops[2];
};

CpuAndCuda predict_on_cpu_and_cuda(core::Trace trace, const std::vector<std::int64_t>& micro, bool boundaries_on_host) {
  const planner::LayerGraph graph(trace);
  CpuAndCuda out;
  for (const bool cuda : {false, true}) {
    trace.device.kind = cuda ? "cuda" : "cpu";
    const core::CostModel costs(trace);
    out.predicted[cuda] = planner::predict_l2l_step(costs, graph, micro, core::L2LChoice{boundaries_on_host}, &out.ops[cuda]);
    core::StepChoice choice;
    choice.micro_batches = micro;
    choice.l2l = core::L2LChoice{boundaries_on_host};
    const auto simulated = simulator::simulate(planner::build_schedule(costs, graph, choice));
    EXPECT_EQ(simulated.peak_bytes, out.predicted[cuda].device_peak_bytes) << "cuda " << cuda;
    EXPECT_EQ(simulated.makespan_ns, out.predicted[cuda].step_ns) << "cuda " << cuda;
  }
  EXPECT_EQ(out.ops[0].size(), out.ops[1].size());
  return out;
}

// The constant-memory variant's forward on a GPU: a stage's inputs come back from the host stash
// before it runs and stay on the device through it; the CPU computes on them where they lie.
TEST(L2LPlanner, OnCudaAHostStashIsBroughtBackForTheForward) {
  core::Trace trace = bert_trace();
  trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = 1e9;
  const std::vector<std::int64_t> micro = {8, 8};
  const auto stages = planner::l2l_stage_costs(trace);
  const auto [predicted, ops] = predict_on_cpu_and_cuda(trace, micro, true);
  const core::CostModel costs(trace);
  std::int64_t inputs = 0;
  for (const auto& stage : stages) {
    for (const int j : stage.inputs) {
      for (const auto b : micro) inputs += costs.layer(static_cast<std::size_t>(j), b).output_bytes;
    }
  }
  ASSERT_GT(inputs, 0);
  EXPECT_EQ(predicted[1].stash_copy_bytes - predicted[0].stash_copy_bytes, inputs);
  EXPECT_GT(predicted[1].stash_copy_ns, predicted[0].stash_copy_ns);
  ASSERT_EQ(ops[0].size(), ops[1].size());
  bool held = false;
  for (std::size_t k = 0; k < ops[0].size(); ++k) {
    if (ops[0][k].kind != planner::OpKind::ForwardNoGrad) continue;
    EXPECT_EQ(ops[0][k].copy_in_ns, 0) << "the CPU brings nothing back in the forward";
    const auto& stage = stages[static_cast<std::size_t>(ops[1][k].stage)];
    std::int64_t brought = 0;
    for (const int j : stage.inputs) brought += costs.layer(static_cast<std::size_t>(j), micro[static_cast<std::size_t>(ops[1][k].micro_batch)]).output_bytes;
    EXPECT_EQ(ops[1][k].activation_bytes - ops[0][k].activation_bytes, brought) << "op " << k;
    held = held || brought > 0;
  }
  EXPECT_TRUE(held);
  EXPECT_GE(predicted[1].device_peak_bytes, predicted[0].device_peak_bytes);
}

// On CUDA a stage's gradients cross to the host while the stage before computes: its backward
// counts them beside its own (L2L waits for them before the next stage makes its own).
TEST(L2LPlanner, OnCudaTheGradientsStillCrossingAreCounted) {
  core::Trace trace = bert_trace();
  trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = 1e9;
  const auto stages = planner::l2l_stage_costs(trace);
  const auto [predicted, ops] = predict_on_cpu_and_cuda(trace, {8, 8}, false);
  ASSERT_EQ(ops[0].size(), ops[1].size());
  int counted = 0;
  for (std::size_t k = 0; k < ops[0].size(); ++k) {
    const auto s = static_cast<std::size_t>(ops[1][k].stage);
    const bool backward = ops[1][k].kind == planner::OpKind::Recompute || ops[1][k].kind == planner::OpKind::Backward;
    const std::int64_t crossing = backward && s + 1 < stages.size() ? stages[s + 1].parameter_bytes : 0;
    EXPECT_EQ(ops[1][k].gradient_bytes - ops[0][k].gradient_bytes, crossing) << "op " << k;
    counted += crossing > 0;
  }
  EXPECT_GT(counted, 0);
  EXPECT_GT(predicted[1].device_peak_bytes, predicted[0].device_peak_bytes);
}

TEST(L2LPlanner, ScheduleSimulatesToThePrediction) {
  core::Trace trace = bert_trace();
  for (const double bandwidth : {0.0, 1e9}) {
    trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = bandwidth;
    const core::CostModel costs(trace);
    const planner::LayerGraph graph(trace);
    for (const bool on_host : {false, true}) {
      core::StepChoice choice;
      choice.micro_batches = {6, 5, 5};
      choice.l2l = core::L2LChoice{on_host};
      const auto predicted = planner::predict_step(costs, graph, choice);
      const auto direct = planner::predict_l2l_step(costs, graph, choice.micro_batches, core::L2LChoice{on_host});
      EXPECT_EQ(predicted.peak_bytes, direct.device_peak_bytes);
      EXPECT_EQ(predicted.step_ns, direct.step_ns);
      const auto schedule = planner::build_schedule(costs, graph, choice);
      const auto sim = simulator::simulate(schedule);
      EXPECT_EQ(sim.peak_bytes, predicted.peak_bytes) << "boundaries on host " << on_host;
      EXPECT_EQ(sim.makespan_ns, predicted.step_ns);
      // The device ends the step empty: every change it saw is undone.
      EXPECT_EQ(sim.memory.back().total(), 0);
      int stash_copies = 0;
      for (const auto& task : schedule.tasks) stash_copies += task.category == "boundary stash";
      // Each micro-batch's boundaries out in forward, in and their gradients out in backward.
      EXPECT_EQ(stash_copies > 0, on_host && bandwidth > 0);
      EXPECT_EQ(direct.stash_copy_bytes > 0, on_host);
      if (on_host && bandwidth > 0) {
        EXPECT_NEAR(static_cast<double>(direct.stash_copy_ns), static_cast<double>(direct.stash_copy_bytes) / bandwidth * 1e9,
                    static_cast<double>(stash_copies));
      }
    }
  }
}

// With a copy bandwidth (a CPU trace's memcpy, a CUDA trace's pinned copies) the schedule has copy
// and host-optimizer lanes; the simulator's step is the planner's, and the bound follows the bandwidth.
TEST(L2LPlanner, CopyLanesNameTheBound) {
  core::Trace trace = bert_trace();
  const planner::LayerGraph graph(trace);
  core::StepChoice choice;
  choice.micro_batches = {8, 8};
  choice.l2l = core::L2LChoice{false};
  std::int64_t previous_step = 0;
  for (const double bandwidth : {1e12, 1e9, 1e7}) {
    trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = bandwidth;
    const core::CostModel costs(trace);
    const auto p = planner::predict_l2l_step(costs, graph, choice.micro_batches, core::L2LChoice{false});
    const auto sim = simulator::simulate(planner::build_schedule(costs, graph, choice));
    EXPECT_EQ(sim.makespan_ns, p.step_ns) << bandwidth;
    EXPECT_EQ(sim.peak_bytes, p.device_peak_bytes);
    // Parameters in twice (but the last stage's once), gradients out once.
    EXPECT_NEAR(static_cast<double>(p.copy_ns), static_cast<double>(p.copy_bytes) / bandwidth * 1e9, 1e-6 * static_cast<double>(p.copy_ns) + 20);
    EXPECT_GT(p.step_ns, previous_step);
    previous_step = p.step_ns;
    std::printf("%.0e B/s: %s\n", bandwidth, planner::describe_l2l_bound(p).c_str());
    if (bandwidth == 1e12) {
      EXPECT_EQ(p.bound, "compute");
    }
    if (bandwidth == 1e7) {
      EXPECT_EQ(p.bound, "transfer");
    }
  }
}

// On a CPU the host optimizer's thread runs on the cores the compute uses, so its time adds to the
// step: with copies settled before each stage computes, the step is the three lanes end to end. On a
// GPU copies and the host optimizer overlap the device's work. The simulator's schedule follows either.
TEST(L2LPlanner, HostOptimizerAddsToTheStepOnTheCpu) {
  core::Trace trace = bert_trace();
  trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = 1e9;
  const planner::LayerGraph graph(trace);
  core::StepChoice choice;
  choice.micro_batches = {8, 8};
  choice.l2l = core::L2LChoice{false};
  std::int64_t steps[2] = {0, 0};
  for (const bool cuda : {false, true}) {
    trace.device.kind = cuda ? "cuda" : "cpu";
    const core::CostModel costs(trace);
    const auto p = planner::predict_l2l_step(costs, graph, choice.micro_batches, *choice.l2l);
    EXPECT_EQ(p.host_shares_compute, !cuda);
    EXPECT_EQ(simulator::simulate(planner::build_schedule(costs, graph, choice)).makespan_ns, p.step_ns);
    if (!cuda) {
      EXPECT_EQ(p.step_ns, p.compute_ns + p.copy_ns + p.host_optimizer_ns);
      EXPECT_NE(planner::describe_l2l_bound(p).find("it adds to the step"), std::string::npos);
    } else {
      // Copy streams: prefetches and gradient copies run beside the compute, which they delay only
      // where a stage's parameters have not landed.
      EXPECT_GE(p.step_ns, p.compute_ns);
      EXPECT_LT(p.step_ns, p.compute_ns + p.copy_ns) << planner::describe_l2l_bound(p);
    }
    steps[cuda ? 1 : 0] = p.step_ns;
  }
  EXPECT_GT(steps[0], steps[1]);
}

// The largest-model estimate: the trace's model plus repeated blocks, bounded by the device (the
// stash each block adds) or by the host (each block's training state).
TEST(L2LPlanner, LargestModelFollowsTheBounds) {
  const core::Trace trace = bert_trace();
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const std::vector<std::int64_t> micro = {4, 4, 4, 4};
  const auto alone = planner::predict_l2l_step(costs, graph, micro, core::L2LChoice{false});
  const std::int64_t host = 8 * costs.static_bytes();
  // The device bound: a limit of the model's peak plus exactly ten blocks' stash.
  const auto probe = planner::largest_l2l_model(costs, graph, micro, false, alone.device_peak_bytes, host);
  ASSERT_TRUE(probe.fits);
  ASSERT_GT(probe.device_bytes_per_block, 0);
  const auto ten = planner::largest_l2l_model(costs, graph, micro, false,
                                              alone.device_peak_bytes + 10 * probe.device_bytes_per_block, 0);
  EXPECT_EQ(ten.extra_blocks, 10);
  EXPECT_EQ(ten.bound, "device budget");
  EXPECT_NEAR(ten.parameters, static_cast<double>(costs.param_bytes() + 10 * ten.block_parameter_bytes) / 4.0, 1.0);
  EXPECT_DOUBLE_EQ(ten.bytes_per_parameter, 4.0);  // fp32, from the optimizer state per element
  // Boundaries on the host: the device does not bound depth; the host does, or nothing known does.
  const auto on_host = planner::largest_l2l_model(costs, graph, micro, true, alone.device_peak_bytes, host);
  EXPECT_EQ(on_host.device_bytes_per_block, 0);
  EXPECT_EQ(on_host.bound, "host memory");
  const auto state = planner::predict_l2l_step(costs, graph, micro, core::L2LChoice{true}).host_bytes;
  EXPECT_EQ(on_host.extra_blocks, (host - state) / on_host.host_bytes_per_block);
  EXPECT_TRUE(planner::largest_l2l_model(costs, graph, micro, true, alone.device_peak_bytes, 0).unbounded);
  // Below the model's own peak: not even it.
  EXPECT_FALSE(planner::largest_l2l_model(costs, graph, micro, false, alone.device_peak_bytes - 1, host).fits);
}

// A plan that asks L2L for what it cannot run is refused with one line naming why.
TEST(L2LPlanner, HandEditedPlansL2LCannotRunAreRefused) {
  const core::Trace trace = bert_trace();
  const std::int64_t least = planner::plan_step(trace, request_for(1, "mbp,checkpoint")).smallest_budget;
  const auto outcome = planner::plan_step(trace, request_for(least / 2, "mbp,l2l"));
  ASSERT_TRUE(outcome.plan);
  const auto refusal = [&](core::Plan plan, const core::Trace& against) -> std::string {
    try {
      planner::check_choice(plan, against, "p.json");
    } catch (const core::InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(refusal(*outcome.plan, trace), "");
  core::Plan checkpointed = *outcome.plan;
  checkpointed.choice.checkpointed_blocks = {0};
  EXPECT_NE(refusal(checkpointed, trace).find("$.l2l: L2L recomputes every block"), std::string::npos);
  core::Plan tempo = *outcome.plan;
  tempo.choice.layers[10].variant = core::LayerVariant::Tempo;
  EXPECT_NE(refusal(tempo, trace).find("standard layers only"), std::string::npos) << refusal(tempo, trace);
  core::Plan nowhere = *outcome.plan;
  nowhere.choice.l2l->from_block = 99;
  EXPECT_NE(refusal(nowhere, trace).find("p.json: $.l2l.from_block: bert has no block 99 (its blocks: 0, 1"), std::string::npos)
      << refusal(nowhere, trace);
  nowhere.choice.l2l->from_block = 1;
  EXPECT_EQ(refusal(nowhere, trace), "");
  // The cnn has BatchNorm: its plan with l2l is refused, naming the layer.
  const core::Trace cnn = core::read_trace_file(std::filesystem::path(HEADROOM_TRACES_DIR) / "cpu-cnn.json");
  EXPECT_FALSE(planner::applies_to(planner::Strategy::L2L, cnn));
  const auto cnn_plan = planner::plan_step(cnn, request_for(core::CostModel(cnn).static_bytes() * 4, "mbp"));
  ASSERT_TRUE(cnn_plan.plan);
  core::Plan with_l2l = *cnn_plan.plan;
  with_l2l.choice.l2l = core::L2LChoice{};
  const std::string why = refusal(with_l2l, cnn);
  EXPECT_NE(why.find("p.json: $.l2l: L2L cannot run cnn: its BatchNorm layer"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos);
}

// On a GPU L2L keeps the libraries' workspaces on the device beside its stages, and steps its
// offloaded stages' optimizer on the host's cores at the rate the trace measured there
// (optimizer.host_ns_per_param), not at the GPU's: an H200's Adam ran 8 times faster than its
// host's 16 cores. A CPU trace's host is its device: its own optimizer time stands.
TEST(L2LPlanner, OnCudaTheHostOptimizerStepsAtTheHostsRate) {
  core::Trace trace = bert_trace();
  trace.device.host_to_device_bytes_per_s = trace.device.device_to_host_bytes_per_s = 1e9;
  const planner::LayerGraph graph(trace);
  const std::vector<std::int64_t> micro{8, 8};
  const core::L2LChoice whole_model{false};
  const auto predict = [&](const core::Trace& t) {
    const core::CostModel costs(t);
    const auto p = planner::predict_l2l_step(costs, graph, micro, whole_model);
    core::StepChoice choice;
    choice.micro_batches = micro;
    choice.l2l = whole_model;
    const auto sim = simulator::simulate(planner::build_schedule(costs, graph, choice));
    EXPECT_EQ(sim.peak_bytes, p.device_peak_bytes);
    EXPECT_EQ(sim.makespan_ns, p.step_ns);
    return p;
  };
  const auto cpu = predict(trace);
  trace.device.kind = "cuda";
  const auto gpu_rate = predict(trace);
  EXPECT_EQ(gpu_rate.host_optimizer_ns, cpu.host_optimizer_ns);  // the trace's optimizer time either way

  core::Trace measured = trace;
  measured.optimizer.host_ns_per_param = 50.0;
  measured.workspace_bytes = std::int64_t{64} << 20;
  const auto host_rate = predict(measured);
  const double elements = static_cast<double>(trace.param_bytes()) / 4;  // float32, every stage offloaded
  EXPECT_NEAR(static_cast<double>(host_rate.host_optimizer_ns), 50.0 * elements, static_cast<double>(host_rate.stages));
  EXPECT_GT(host_rate.host_optimizer_ns, gpu_rate.host_optimizer_ns);
  EXPECT_GE(host_rate.step_ns, gpu_rate.step_ns);
  EXPECT_EQ(host_rate.device_peak_bytes, gpu_rate.device_peak_bytes + measured.workspace_bytes);
  EXPECT_EQ(host_rate.host_bytes, gpu_rate.host_bytes);

  measured.device.kind = "cpu";
  EXPECT_EQ(predict(measured).host_optimizer_ns, cpu.host_optimizer_ns);
}

}  // namespace
}  // namespace headroom
