// Data parallel in the planner (planner/data_parallel_model.h): the split of the global batch over
// workers, the all-reduce's overlap with the last backward, the buckets' memory, and the simulator
// agreeing with the plan.
#include <gtest/gtest.h>

#include <numeric>

#include "core/collective.h"
#include "core/cost_model.h"
#include "core/errors.h"
#include "core/plan.h"
#include "core/sharding.h"
#include "core/trace.h"
#include "planner/data_parallel_model.h"
#include "planner/infcl_model.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "planner/ring_infcl_model.h"
#include "planner/step_sequence.h"
#include "simulator/simulator.h"
#include "support/plan_requests.h"

namespace headroom {
namespace {

using testing::committed;

// The committed gpt with what a trace profiled since sharding records (its tensor count and largest
// tensor), which stages 2 and 3 need.
core::Trace shardable_gpt() {
  core::Trace trace = committed("cpu-gpt.json");
  trace.optimizer.param_tensors = 30;
  trace.optimizer.largest_param_elements = 1 << 20;
  return trace;
}

planner::PlanRequest request(std::int64_t budget, std::int64_t batch, int workers) {
  planner::PlanRequest r;
  r.budget_bytes = budget;
  r.global_batch = batch;
  r.workers = workers;
  r.link = core::parse_link("1GB/s,20us");
  r.trace_path = "t.json";
  r.trace_sha256 = std::string(64, '0');
  r.strategies = {planner::Strategy::MicroBatching, planner::Strategy::Checkpointing};
  return r;
}

// The global batch is shared out with the remainder on the lowest ranks, every micro-batch is
// weighed b_i / B over the global batch, and the plan reads back equal from its file.
// A contrastive loss couples the whole batch: over workers it runs as Inf-CL's ring. Each worker
// caches its share's embeddings, computes its rows' loss against every block and holds the ring's
// blocks in flight; the prediction is worker 0's and the simulator agrees with it.
TEST(DataParallelPlan, AContrastiveModelRunsTheRingInfCl) {
  const core::Trace trace = committed("cpu-clip.json");
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const planner::ContrastiveLossModel loss(*trace.contrastive_loss);
  for (const std::string link : {"100GB/s,1us", "50MB/s,1ms"}) {
    SCOPED_TRACE(link);
    // 2 workers, 65 pairs: worker 0 caches 33 (as 17 + 16), worker 1 32.
    core::StepChoice dp = core::StepChoice{}.with_micro_batches({17, 16, 16, 16});
    dp.data_parallel = core::DataParallelChoice{2, {2, 2}, core::parse_link(link)};
    dp.ring_loss = true;
    dp.loss_tiles = loss.tiles().front();
    const auto seq = planner::step_sequence(costs, graph, dp);
    // The loss phase: worker 0's rows, the ring's buffers on top, its share of the whole loss's time
    // plus the transfers.
    const planner::RingLossShape shape{33, 33, 65, 2, dp.data_parallel->link};
    const auto ops = planner::ring_loss_ops(loss, shape, dp.loss_tiles);
    const auto own = planner::ring_rows_loss(loss, shape, dp.loss_tiles), whole = loss.loss(65, dp.loss_tiles);
    // The measured tile is wider than a share: its buffers shrink to the tile the ring uses; a tile
    // a share holds is the measured line itself.
    EXPECT_LT(own.bwd_transient_bytes, loss.loss(33, dp.loss_tiles).bwd_transient_bytes);
    const auto wide = planner::ring_rows_loss(loss, {2048, 2048, 4096, 2, dp.data_parallel->link}, dp.loss_tiles);
    EXPECT_EQ(wide.bwd_transient_bytes, loss.loss(2048, dp.loss_tiles).bwd_transient_bytes);
    const auto buffers = planner::ring_buffer_bytes(loss, 33, 2);
    EXPECT_EQ(buffers.forward, loss.embedding_bytes(33) + 33 * 4);
    EXPECT_EQ(buffers.backward, loss.embedding_bytes(33) + 3 * 33 * 4);
    EXPECT_EQ(planner::ring_buffer_bytes(loss, 33, 4).backward, 2 * loss.embedding_bytes(33) + 4 * 33 * 4);
    EXPECT_EQ(planner::ring_buffer_bytes(loss, 33, 1).backward, 0);
    EXPECT_EQ(ops[0].transient_bytes, own.fwd_transient_bytes + buffers.forward);
    EXPECT_EQ(ops[1].transient_bytes, own.bwd_transient_bytes + buffers.backward);
    EXPECT_GT(ops[0].duration_ns, std::llround(static_cast<double>(whole.fwd_ns) * 33 / 65) - 1);
    bool found = false;
    for (const auto& list : seq.ops) {
      if (list.size() == 3 && list[0].kind == planner::OpKind::Forward && list[0].layer == loss.layer()) {
        EXPECT_EQ(list[0].transient_bytes, ops[0].transient_bytes);
        EXPECT_EQ(list[0].duration_ns, ops[0].duration_ns);
        found = true;
      }
    }
    EXPECT_TRUE(found) << "no ring loss phase in the step";
    // The last micro-batch sends the buckets: its own segment, before the optimizer's.
    ASSERT_GE(seq.segments.size(), 3u);
    EXPECT_TRUE(seq.segments[seq.segments.size() - 2].keeps_input);
    const auto predicted = planner::predict_step(costs, graph, dp);
    const auto schedule = planner::build_schedule(costs, graph, dp);
    const auto sim = simulator::simulate(schedule);
    EXPECT_EQ(sim.peak_bytes, predicted.peak_bytes);
    EXPECT_EQ(sim.makespan_ns, predicted.step_ns);
  }
  // A slower link costs the ring time; the plan search plans it, and a plan file of it checks.
  core::StepChoice fast = core::StepChoice{}.with_micro_batches({17, 16, 16, 16}), slow;
  fast.data_parallel = core::DataParallelChoice{2, {2, 2}, core::parse_link("100GB/s,1us")};
  fast.ring_loss = true;
  fast.loss_tiles = loss.tiles().front();
  slow = fast;
  slow.data_parallel->link = core::parse_link("50MB/s,1ms");
  EXPECT_GT(planner::predict_step(costs, graph, slow).step_ns, planner::predict_step(costs, graph, fast).step_ns);
  // An uneven split (4095 over 2 and 4), where the search's worker-0 view of the global batch is
  // not exact: the plan states what simulating it gives.
  for (const int workers : {2, 4}) {
    auto r = request(12 << 20, 4095, workers);
    r.strategies.insert(planner::Strategy::InfCl);
    r.margin_fraction = 0;
    const auto outcome = planner::plan_step(trace, r);
    ASSERT_TRUE(outcome.plan) << outcome.reason;
    EXPECT_EQ(outcome.plan->choice.workers(), workers);
    const auto sim = simulator::simulate(planner::plan_schedule(trace, *outcome.plan, "p.json"));
    EXPECT_EQ(sim.peak_bytes, outcome.plan->predicted.peak_bytes);
    EXPECT_NEAR(static_cast<double>(sim.makespan_ns) / 1e9, outcome.plan->predicted.step_seconds, 1e-9);
    EXPECT_NE(outcome.plan->warnings.back().find("the loss over all 4095 pairs once as Inf-CL's ring"), std::string::npos)
        << outcome.plan->warnings.back();
  }
}

TEST(DataParallelPlan, SharesTheGlobalBatchOverWorkers) {
  const core::Trace trace = committed("cpu-bert.json");
  const core::CostModel costs(trace);
  // Tight enough that a worker's 13 samples need micro-batches.
  const planner::LayerGraph graph(trace);
  const auto whole = planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({13}));
  const auto outcome = planner::plan_step(trace, request(whole.peak_bytes * 3 / 4 + costs.gradient_bytes(), 50, 4));
  ASSERT_TRUE(outcome.plan) << outcome.reason;
  const core::Plan& plan = *outcome.plan;
  const auto& c = plan.choice;
  EXPECT_EQ(c.workers(), 4);
  ASSERT_EQ(c.data_parallel->micro_batches_per_worker.size(), 4u);
  std::vector<std::int64_t> shares;
  for (int r = 0; r < 4; ++r) {
    const auto sizes = c.worker_micro_batches(r);
    shares.push_back(std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0}));
  }
  EXPECT_EQ(shares, (std::vector<std::int64_t>{13, 13, 12, 12}));
  EXPECT_GT(c.worker_micro_batches(0).size(), 1u);
  EXPECT_EQ(c.samples(), 50);
  double weights = 0;
  for (std::size_t i = 0; i < c.micro_batches.size(); ++i) weights += plan.loss_weight(i);
  EXPECT_NEAR(weights, 1.0, 1e-12);
  const core::Plan back = core::plan_from_json(core::to_json(plan));
  EXPECT_EQ(back, plan);
  planner::check_choice(plan, trace, "p.json");
}

// The prediction is worker 0's step: its compute, the buckets' memory, and whatever of the
// all-reduce the last micro-batch's backward does not hide; the simulator agrees to the byte and
// the nanosecond, with the all-reduces on the collective stream.
TEST(DataParallelPlan, PredictionAndSimulationAgree) {
  const core::Trace trace = committed("cpu-bert.json");
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  for (const std::string link : {"100GB/s,1us", "1GB/s,20us", "50MB/s,1ms"}) {
    SCOPED_TRACE(link);
    core::StepChoice one = core::StepChoice{}.with_micro_batches({4, 4, 3});
    core::StepChoice dp = one;
    dp.data_parallel = core::DataParallelChoice{3, {}, core::parse_link(link), 1 << 20};
    const auto single = planner::predict_step(costs, graph, one);
    const auto parallel = planner::predict_step(costs, graph, dp);
    // Each worker keeps a buffer per bucket: as many bytes as its gradients.
    EXPECT_EQ(parallel.peak_bytes - single.peak_bytes, costs.gradient_bytes());
    const auto seq = planner::step_sequence(costs, graph, dp);
    const auto& last = seq.ops[seq.segments[seq.segments.size() - 2].ops];
    const auto timing = planner::allreduce_timing(costs, last, dp);
    EXPECT_GT(timing.buckets.size(), 1u);
    // The step adds the gradients' copies into the buckets and what the worker then waits for: the
    // link past its compute and the sums copied back.
    EXPECT_GT(timing.copy_in_ns, 0);
    EXPECT_EQ(parallel.step_ns - single.step_ns, timing.copy_in_ns + timing.exposed_ns);
    EXPECT_LE(timing.exposed_ns, timing.total_ns + timing.copy_in_ns);
    const auto schedule = planner::build_schedule(costs, graph, dp);
    const auto sim = simulator::simulate(schedule);
    EXPECT_EQ(sim.peak_bytes, parallel.peak_bytes);
    EXPECT_EQ(sim.makespan_ns, parallel.step_ns);
    int collectives = 0;
    int copies = 0;
    for (const auto& t : schedule.tasks) {
      collectives += t.stream == core::Stream::Collective;
      copies += t.category == "gradient copies";
    }
    // Into the buckets, and each bucket back.
    EXPECT_EQ(copies, 1 + static_cast<int>(timing.buckets.size()));
    EXPECT_EQ(collectives, static_cast<int>(timing.buckets.size()));
    // A lane per worker in the Chrome trace, each with every bucket's all-reduce.
    const auto chrome = simulator::chrome_trace(schedule, sim, "dp");
    int lanes = 0, spans = 0;
    for (const auto& e : chrome["traceEvents"]) {
      if (e.value("name", "") == "thread_name" &&
          e["args"]["name"].get<std::string>().rfind("collective, worker", 0) == 0) {
        ++lanes;
      }
      if (e.value("cat", "") == "all-reduce") ++spans;
    }
    EXPECT_EQ(lanes, 3);
    EXPECT_EQ(spans, 3 * collectives);
  }
}

// A slow link shows as exposed time, a fast one hides under the last backward.
TEST(DataParallelPlan, OverlapHidesAFastLinkAndNotASlowOne) {
  const core::Trace trace = committed("cpu-bert.json");
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  core::StepChoice dp = core::StepChoice{}.with_micro_batches({4, 4});
  dp.data_parallel = core::DataParallelChoice{2, {}, {}, 1 << 20};
  const auto seq = planner::step_sequence(costs, graph, dp);
  const auto& last = seq.ops[seq.segments[seq.segments.size() - 2].ops];
  dp.data_parallel->link = core::parse_link("1TB/s,1ns");
  const auto fast = planner::allreduce_timing(costs, last, dp);
  dp.data_parallel->link = core::parse_link("10MB/s,1ms");
  const auto slow = planner::allreduce_timing(costs, last, dp);
  // Only the last bucket (the first layers' gradients, ready at the very end) can stick out.
  EXPECT_LE(fast.link_past_compute_ns, fast.buckets.back().duration_ns);
  EXPECT_GT(slow.link_past_compute_ns, slow.total_ns / 2);
  // The sums' copies back into the gradients are waited for after the last backward, whatever the
  // link: on a fast one, one after another, with what of the last bucket sticks out.
  std::int64_t copy_back = 0;
  for (const auto& b : fast.buckets) copy_back += planner::gradient_copy_ns(costs, b.bytes, 1);
  EXPECT_GT(copy_back, 0);
  EXPECT_GE(fast.exposed_ns, copy_back);
  EXPECT_LE(fast.exposed_ns, copy_back + fast.buckets.back().duration_ns);
  EXPECT_EQ(fast.copy_in_ns, copy_back);
}

// Where the collectives' threads share the cores with the compute (CollectiveLink::beside_compute,
// as `profile --measure-link` times it), a collective beside the compute slows it by that share of
// its time: at a share of 1 nothing hides, and each micro-batch takes its collectives' whole time
// past its compute. The simulator agrees at every share, at stage 0 (the buckets' all-reduce after
// the last backward) and stage 3 (gathers and reduces every micro-batch).
TEST(DataParallelPlan, CollectivesBesideTheComputeSlowItByTheLinksShare) {
  core::Trace trace = shardable_gpt();
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const core::StepChoice one = core::StepChoice{}.with_micro_batches({2, 2, 2});
  for (const int stage : {0, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    core::StepChoice dp = one;
    dp.data_parallel = core::DataParallelChoice{2, {}, core::parse_link("1GB/s,20us"), 1 << 20, stage};
    const auto hidden = planner::predict_step(costs, graph, dp);
    std::int64_t previous = hidden.step_ns;
    for (const double share : {0.5, 1.0, 1.5}) {
      SCOPED_TRACE(share);
      dp.data_parallel->link.beside_compute = share;
      const auto p = planner::predict_step(costs, graph, dp);
      EXPECT_GT(p.step_ns, previous);
      EXPECT_EQ(p.peak_bytes, hidden.peak_bytes);
      previous = p.step_ns;
      const auto seq = planner::step_sequence(costs, graph, dp);
      std::int64_t added = 0, added_once = 0;  // a step's, and each segment's once (as the schedule has them)
      if (stage == 0) {
        const auto timing = planner::allreduce_timing(costs, seq.ops[seq.segments[seq.segments.size() - 2].ops], dp);
        EXPECT_EQ(timing.beside_ns, std::llround(static_cast<double>(timing.total_ns - timing.link_past_compute_ns) * share));
        if (share == 1.0) EXPECT_EQ(timing.link_past_compute_ns + timing.beside_ns, timing.total_ns);
        added = added_once = timing.beside_ns;
      } else {
        for (const auto& segment : seq.segments) {
          const auto& ops = seq.ops[segment.ops];
          std::int64_t busy = 0, copies = 0;
          for (const auto& op : ops) {
            busy += op.gather_ns + op.reduce_ns;
            copies += op.reduce_copy_ns;
          }
          const auto waits = planner::collective_waits(ops, share);
          const auto unshared = planner::collective_waits(ops, 0);
          EXPECT_EQ(waits.gather_ns, unshared.gather_ns);
          EXPECT_EQ(waits.reduce_ns, unshared.reduce_ns);
          // The reduces' waits hold the worker's copies for them, which are compute, not link.
          const std::int64_t link_waits = waits.gather_ns + waits.reduce_ns - copies;
          EXPECT_EQ(waits.beside_ns, std::llround(static_cast<double>(busy - link_waits) * share));
          if (share == 1.0) EXPECT_EQ(link_waits + waits.beside_ns, busy);
          EXPECT_EQ(planner::collectives_past_compute_ns(ops, share), waits.gather_ns + waits.reduce_ns + waits.beside_ns);
          added += waits.beside_ns * segment.repeat;
          added_once += waits.beside_ns;
        }
      }
      EXPECT_GT(added, 0);
      EXPECT_EQ(p.step_ns - hidden.step_ns, added);
      const auto schedule = planner::build_schedule(costs, graph, dp);
      const auto sim = simulator::simulate(schedule);
      EXPECT_EQ(sim.makespan_ns, p.step_ns);
      EXPECT_EQ(sim.peak_bytes, p.peak_bytes);
      std::int64_t slowed = 0;
      for (const auto& task : schedule.tasks) {
        if (task.category == planner::kBesideComputeCategory) slowed += task.duration_ns;
      }
      EXPECT_EQ(slowed, added_once);
    }
  }
  // A plan names what its compute loses beside the collectives where its link says it loses any.
  auto r = request(1LL << 34, 16, 2);
  r.shard_stage = 3;
  EXPECT_FALSE(planner::plan_step(trace, r).plan->predicted_part(core::kComputeBesideCollectivesSecondsPart));
  r.link.beside_compute = 1;
  const auto outcome = planner::plan_step(trace, r);
  ASSERT_TRUE(outcome.plan) << outcome.reason;
  EXPECT_GT(outcome.plan->predicted_part(core::kComputeBesideCollectivesSecondsPart).value_or(0), 0);
  EXPECT_EQ(core::plan_from_json(core::to_json(*outcome.plan)), *outcome.plan);
}

TEST(DataParallelPlan, BadRequestsAndPlansAreRefused) {
  const core::Trace trace = committed("cpu-mlp.json");
  EXPECT_THROW(planner::plan_step(trace, request(1LL << 40, 4, 0)), core::InputError);
  EXPECT_THROW(planner::plan_step(trace, request(1LL << 40, 4, 5)), core::InputError);
  EXPECT_THROW(planner::plan_step(trace, request(1LL << 40, 4, 4097)), core::InputError);
  auto no_link = request(1LL << 40, 4, 2);
  no_link.link = {};
  EXPECT_THROW(planner::plan_step(trace, no_link), core::InputError);
  // A hand-edited plan whose worker 1 carries more than worker 0 (whose step is predicted).
  auto outcome = planner::plan_step(trace, request(1LL << 40, 5, 2));
  ASSERT_TRUE(outcome.plan);
  auto& c = outcome.plan->choice;
  ASSERT_EQ(c.micro_batches, (std::vector<std::int64_t>{3, 2}));
  c.micro_batches = {2, 3};
  try {
    planner::check_choice(*outcome.plan, trace, "p.json");
    FAIL() << "expected an InputError";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("worker 1 carries more than worker 0"), std::string::npos) << e.what();
  }
  // The plan file: counts that do not add up to the micro-batches.
  auto document = core::to_json(*outcome.plan);
  document["data_parallel"]["micro_batches_per_worker"] = {1, 2};
  EXPECT_THROW(core::plan_from_json(document), core::InputError);
  document["data_parallel"]["micro_batches_per_worker"] = {1};
  EXPECT_THROW(core::plan_from_json(document), core::InputError);
  document.erase("data_parallel");
  EXPECT_THROW(core::plan_from_json(document), core::InputError);
}

// ZeRO's stage 1: worker 0 keeps its ceil(E/N) elements' share of the optimizer state (its range
// of the trainable parameters), steps it, and the plan adds every range's broadcast to the
// optimizer's time. Where the replicated state leaves no plan, the search shards it; where both fit
// it takes the faster, and says what each stage needs.
TEST(DataParallelPlan, StageOneShardsTheOptimizerState) {
  const core::Trace trace = committed("cpu-gpt.json");
  const core::CostModel costs(trace);
  core::StepChoice replicated = core::StepChoice{}.with_micro_batches({1});
  replicated.data_parallel = core::DataParallelChoice{2, {}, core::parse_link("1GB/s,20us")};
  core::StepChoice sharded = replicated;
  sharded.data_parallel->shard_stage = 1;
  const std::int64_t elements = trace.trainable_param_bytes() / 4;
  const std::int64_t state = trace.optimizer.state_bytes;
  EXPECT_EQ(planner::worker_static_bytes(costs, replicated) - planner::worker_static_bytes(costs, sharded),
            state - std::llround(static_cast<double>(state) * static_cast<double>((elements + 1) / 2) / static_cast<double>(elements)));
  EXPECT_EQ(planner::parameter_broadcast_ns(costs, replicated), 0);
  EXPECT_EQ(planner::parameter_broadcast_ns(costs, sharded),
            core::broadcast_ns(4 * ((elements + 1) / 2), 2, sharded.data_parallel->link) +
                core::broadcast_ns(4 * (elements / 2), 2, sharded.data_parallel->link));
  EXPECT_GT(planner::worker_optimizer_ns(costs, sharded), planner::parameter_broadcast_ns(costs, sharded));

  // 60 MiB: stage 0's least plan needs 65.3 MiB, stage 1's 53.3 MiB.
  auto at = request(std::int64_t{60} << 20, 16, 2);
  at.strategies.insert(planner::Strategy::Tempo);
  at.shard_stage = 0;
  EXPECT_FALSE(planner::plan_step(trace, at).plan);
  at.shard_stage.reset();
  const auto outcome = planner::plan_step(trace, at);
  ASSERT_TRUE(outcome.plan) << outcome.reason;
  EXPECT_EQ(outcome.plan->choice.data_parallel->shard_stage, 1);
  ASSERT_EQ(outcome.shard_stages.size(), 2u);
  EXPECT_FALSE(outcome.shard_stages[0].predicted);
  EXPECT_GT(outcome.shard_stages[0].smallest_budget, at.budget_bytes);
  ASSERT_TRUE(outcome.shard_stages[1].predicted);
  EXPECT_EQ(*outcome.shard_stages[1].predicted, outcome.plan->predicted);
  EXPECT_LT(outcome.shard_stages[1].static_bytes, outcome.shard_stages[0].static_bytes);
  // The plan reads back with its stage, and its parts name the broadcast.
  EXPECT_EQ(core::plan_from_json(core::to_json(*outcome.plan)), *outcome.plan);
  EXPECT_TRUE(outcome.plan->predicted_part(core::kParameterBroadcastSecondsPart));
  planner::check_choice(*outcome.plan, trace, "p.json");

  // Where both fit, the faster one.
  const auto roomy = planner::plan_step(trace, request(1LL << 34, 16, 2));
  ASSERT_TRUE(roomy.plan);
  ASSERT_EQ(roomy.shard_stages.size(), 2u);
  const auto& rows = roomy.shard_stages;
  const int faster = rows[1].predicted->samples_per_second > rows[0].predicted->samples_per_second ? 1 : 0;
  EXPECT_EQ(roomy.plan->choice.data_parallel->shard_stage, faster);
}

// ZeRO's stage 2: worker 0 keeps its range's gradients alone and no buckets; a micro-batch takes
// longer by its gradients' reduces (a buffer's after the backward that fills it), every micro-batch;
// the simulator agrees with the prediction.
TEST(DataParallelPlan, StageTwoShardsTheGradientsAndReducesThemInBackward) {
  core::Trace trace = shardable_gpt();
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const core::CollectiveLink link = core::parse_link("1GB/s,20us");
  core::StepChoice one = core::StepChoice{}.with_micro_batches({2, 2});
  one.data_parallel = core::DataParallelChoice{2, {}, link, core::kDefaultBucketCapBytes, 1};
  core::StepChoice two = one;
  two.data_parallel->shard_stage = 2;
  const std::int64_t elements = trace.trainable_param_bytes() / 4;
  EXPECT_EQ(planner::bucket_buffer_bytes(costs, two), 0);
  // Its range's gradients and the two buffers gradients are reduced from.
  EXPECT_EQ(planner::worker_gradient_bytes(costs, two), 4 * ((elements + 1) / 2 + 2 * core::kShardedReducePieceElements));
  EXPECT_EQ(planner::worker_static_bytes(costs, one) - planner::worker_static_bytes(costs, two),
            costs.gradient_bytes() + planner::bucket_buffer_bytes(costs, one) - planner::worker_gradient_bytes(costs, two));
  const auto per_layer = planner::gradient_reduce_ns(costs, graph, two);
  ASSERT_EQ(per_layer.size(), trace.layers.size());
  std::int64_t total = 0;
  for (const auto ns : per_layer) total += ns;
  // Gradients packed into buffers of the largest tensor's elements: a collective per buffer, and one
  // more for the buffer the two ranges meet in; every gradient byte once: one round for 2 workers.
  const std::int64_t buffers = (elements + (1 << 20) - 1) >> 20;
  ASSERT_NE(elements % (1 << 20), (elements + 1) / 2 % (1 << 20));  // the ranges meet inside a buffer
  const std::int64_t collectives = buffers + 1;
  EXPECT_EQ(planner::gradient_reduce_collectives(costs, graph, two), collectives);
  EXPECT_EQ(planner::gradient_reduce_collectives(costs, graph, one), 0);
  EXPECT_NEAR(static_cast<double>(total), static_cast<double>(core::reduce_ns(costs.gradient_bytes(), collectives, 2, link)), 50.0);
  EXPECT_EQ(planner::gradient_reduce_step_ns(costs, graph, two), 2 * total);
  EXPECT_TRUE(planner::gradient_reduce_ns(costs, graph, one).empty());
  // The worker's copies for a micro-batch's reduces: every gradient packed once, and its own range
  // added into its gradients (an add moves half as much again as a copy).
  std::int64_t copies = 0;
  for (const auto ns : planner::gradient_reduce_copy_ns(costs, graph, two)) copies += ns;
  const double copy_ns_per_byte = 1e9 / trace.device.host_to_device_bytes_per_s;
  ASSERT_GT(trace.device.host_to_device_bytes_per_s, 0);
  EXPECT_NEAR(static_cast<double>(copies), copy_ns_per_byte * (4.0 * elements + 1.5 * 4.0 * ((elements + 1) / 2)),
              static_cast<double>(trace.layers.size() + buffers));
  EXPECT_TRUE(planner::gradient_reduce_copy_ns(costs, graph, one).empty());
  const auto p1 = planner::predict_step(costs, graph, one);
  const auto p2 = planner::predict_step(costs, graph, two);
  EXPECT_LT(p2.peak_bytes, p1.peak_bytes);
  // The reduces overlap the backward: a micro-batch takes longer by at most all of them, and at
  // least by the last one (nothing follows it).
  const auto seq = planner::step_sequence(costs, graph, one);
  const auto with_reduces = [&](std::vector<std::int64_t> reduce_ns) {
    std::vector<planner::Op> ops = seq.ops[seq.segments.front().ops];
    EXPECT_TRUE(planner::add_gradient_reduces(ops, reduce_ns));
    return ops;
  };
  const auto& ops = seq.ops[seq.segments.front().ops];
  const std::int64_t past = planner::collectives_past_compute_ns(with_reduces(per_layer), 0);
  EXPECT_LE(past, total);
  std::int64_t last = 0;
  for (const auto& op : ops) {
    if (op.kind == planner::OpKind::Backward && op.layer >= 0 && per_layer[static_cast<std::size_t>(op.layer)] > 0) {
      last = per_layer[static_cast<std::size_t>(op.layer)];
    }
  }
  EXPECT_GE(past, last);
  // A link so slow that nothing hides: every reduce, one after another, past the micro-batch's start.
  core::StepChoice slow = two;
  slow.data_parallel->link = core::parse_link("1MB/s,20us");
  std::int64_t slow_total = 0;
  for (const auto ns : planner::gradient_reduce_ns(costs, graph, slow)) slow_total += ns;
  std::int64_t compute = 0;
  for (const auto& op : ops) compute += op.duration_ns;
  EXPECT_GT(planner::collectives_past_compute_ns(with_reduces(planner::gradient_reduce_ns(costs, graph, slow)), 0), slow_total - compute);
  const core::Schedule schedule = planner::build_schedule(costs, graph, two);
  const auto sim = simulator::simulate(schedule);
  EXPECT_EQ(sim.peak_bytes, p2.peak_bytes);
  EXPECT_EQ(sim.makespan_ns, p2.step_ns);
  // Each reduce a task on the collective stream (every worker's lane), after its layer's backward:
  // every micro-batch's, each layer's time.
  std::int64_t reduces_ns = 0;
  for (const auto& task : schedule.tasks) {
    if (task.category != "reduce") continue;
    EXPECT_EQ(task.stream, core::Stream::Collective);
    ASSERT_EQ(task.dependencies.size(), 1u);
    // After the worker's copies for it, which follow the layer's backward.
    const core::Task& copies = schedule.tasks[static_cast<std::size_t>(task.dependencies.front())];
    EXPECT_EQ(copies.category, "gradient copies");
    EXPECT_EQ(copies.layer, task.layer);
    EXPECT_EQ(schedule.tasks[static_cast<std::size_t>(copies.dependencies.front())].category, "backward");
    EXPECT_EQ(task.duration_ns, per_layer[static_cast<std::size_t>(task.layer)]);
    reduces_ns += task.duration_ns;
  }
  // Both micro-batches listed: the last one, which keeps its input for the optimizer, is a segment of its own.
  EXPECT_EQ(reduces_ns, planner::gradient_reduce_step_ns(costs, graph, two));
  // Planned: the stage and its parts; a trace without its tensor count cannot be planned at stage 2.
  auto r = request(1LL << 34, 16, 2);
  r.shard_stage = 2;
  const auto outcome = planner::plan_step(trace, r);
  ASSERT_TRUE(outcome.plan) << outcome.reason;
  EXPECT_EQ(outcome.plan->choice.data_parallel->shard_stage, 2);
  EXPECT_TRUE(outcome.plan->predicted_part(core::kGradientReduceSecondsPart));
  EXPECT_TRUE(outcome.plan->predicted_part(core::kExposedGradientReduceSecondsPart));
  EXPECT_EQ(core::plan_from_json(core::to_json(*outcome.plan)), *outcome.plan);
  r.shard_stage.reset();
  EXPECT_EQ(planner::plan_step(trace, r).shard_stages.size(), 5u);  // stage 3 per block and per layer
  EXPECT_EQ(planner::plan_step(committed("cpu-gpt.json"), r).shard_stages.size(), 2u);
  r.shard_stage = 2;
  EXPECT_THROW(planner::plan_step(committed("cpu-gpt.json"), r), core::InputError);
}

// ZeRO's stage 3: worker 0 keeps its range of the trainable parameters alone, and each unit's
// parameters (a block's, or a layer's outside blocks) are gathered for its forward and its backward
// (or its recompute, which keeps them for the backward), each gather on the time and memory of the
// ops that use them; the simulator agrees, with the gathered parameters a memory kind of their own.
TEST(DataParallelPlan, StageThreeGathersEachUnitsParametersWhereTheyAreUsed) {
  core::Trace trace = shardable_gpt();
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const core::CollectiveLink link = core::parse_link("1GB/s,20us");
  core::StepChoice two = core::StepChoice{}.with_micro_batches({2, 2});
  two.data_parallel = core::DataParallelChoice{2, {}, link, core::kDefaultBucketCapBytes, 2};
  core::StepChoice three = two;
  three.data_parallel->shard_stage = 3;
  const std::int64_t elements = trace.trainable_param_bytes() / 4;
  EXPECT_EQ(planner::worker_parameter_bytes(costs, two), costs.param_bytes());
  EXPECT_EQ(planner::worker_parameter_bytes(costs, three), costs.param_bytes() - 4 * (elements - (elements + 1) / 2));
  EXPECT_EQ(planner::worker_static_bytes(costs, two) - planner::worker_static_bytes(costs, three), 4 * (elements / 2));
  EXPECT_EQ(planner::parameter_broadcast_ns(costs, three), 0);
  EXPECT_TRUE(planner::parameter_gathers(graph, two).empty());
  for (const core::GatherUnit by : {core::GatherUnit::Block, core::GatherUnit::Layer}) {
    SCOPED_TRACE(std::string(core::gather_unit_name(by)));
    three.data_parallel->gather = by;
    const planner::ParameterUnits units = planner::parameter_gathers(graph, three);
    const auto& gathers = units.units;
    const auto unit_of = [&](int layer) { return units.unit_of_layer[static_cast<std::size_t>(layer)]; };
    // Per block: each block a unit, and each layer outside blocks (the embedding, its dropout, the
    // final norm, the head, the loss); per layer, each layer.
    const bool per_block = by == core::GatherUnit::Block;
    ASSERT_EQ(gathers.size(), per_block ? graph.blocks().size() + 5u : trace.layers.size());
    const auto with_parameters =
        static_cast<int>(std::count_if(gathers.begin(), gathers.end(), [](const auto& g) { return g.bytes > 0; }));
    EXPECT_EQ(with_parameters, per_block ? static_cast<int>(graph.blocks().size()) + 3 : 15);
    std::int64_t first = 0, gather_total = 0, largest = 0;
    for (std::size_t u = 0; u < gathers.size(); ++u) {
      std::int64_t bytes = 0;
      for (std::size_t i = 0; i < trace.layers.size(); ++i) {
        if (unit_of(static_cast<int>(i)) == static_cast<int>(u)) bytes += trace.layers[i].trainable_param_bytes();
      }
      EXPECT_EQ(gathers[u].bytes, bytes) << u;
      // One broadcast from each owner of a part of the unit's elements.
      std::int64_t ns = 0;
      for (int r = 0; r < 2; ++r) {
        const core::ElementRange owned = core::owned_elements(elements, 2, r);
        const std::int64_t part = std::min(first + bytes / 4, owned.end) - std::max(first, owned.begin);
        if (part > 0) ns += core::broadcast_ns(4 * part, 2, link);
      }
      EXPECT_EQ(gathers[u].ns, ns) << u;
      first += bytes / 4;
      gather_total += gathers[u].ns;
      largest = std::max(largest, bytes);
    }
    for (const auto& block : graph.blocks()) {
      const auto& unit = gathers[static_cast<std::size_t>(unit_of(block.first))];
      EXPECT_EQ(unit_of(block.last) == unit_of(block.first), per_block);
      if (!per_block) continue;
      EXPECT_EQ(trace.layers[static_cast<std::size_t>(unit.first_layer)].block, block.block);
      EXPECT_EQ(trace.layers[static_cast<std::size_t>(unit.last_layer)].block, block.block);
    }
    // Each unit's twice in each micro-batch, the embedding's once: its backward does not read the table.
    std::int64_t embedding_ns = 0;
    for (std::size_t u = 0; u < gathers.size(); ++u) {
      const bool embedding = gathers[u].bytes > 0 && trace.layers[static_cast<std::size_t>(gathers[u].first_layer)].kind == "embedding";
      EXPECT_EQ(gathers[u].for_backward, !embedding) << u;
      if (!gathers[u].for_backward) embedding_ns += gathers[u].ns;
    }
    EXPECT_GT(embedding_ns, 0);
    EXPECT_EQ(planner::parameter_gather_step_ns(planner::step_sequence(costs, graph, three)), 2 * (2 * gather_total - embedding_ns));
    // Op by op, the same ops as stage 2's with each unit's gather on the memory of the ops that hold it
    // (its time on the collective stream), and the next one's from the gathering op before it on.
    const auto ops_of = [&](const core::StepChoice& c) {
      const auto seq = planner::step_sequence(costs, graph, c);
      return seq.ops[seq.segments.front().ops];
    };
    core::StepChoice two_checkpointed = two;
    const int block = graph.blocks().front().block;
    two_checkpointed.checkpointed_blocks = {block};
    core::StepChoice three_checkpointed = three;
    three_checkpointed.checkpointed_blocks = {block};
    for (const auto& [before, after] : {std::pair{two, three}, std::pair{two_checkpointed, three_checkpointed}}) {
      const auto a = ops_of(before), b = ops_of(after);
      ASSERT_EQ(a.size(), b.size());
      std::int64_t kept = 0;
      std::size_t previous_gather = b.size();
      int prefetched = 0, gathered = 0;
      std::vector<bool> held(gathers.size(), false);
      for (std::size_t k = 0; k < a.size(); ++k) {
        if (b[k].kind != planner::OpKind::CollectiveWait) EXPECT_EQ(b[k].duration_ns, a[k].duration_ns);
        if (b[k].gathered_bytes > 0) {
          // Prefetched but the micro-batch's first, and a unit's backward right after its forward.
          const bool after_same_unit = previous_gather < b.size() && unit_of(b[previous_gather].layer) == unit_of(b[k].layer);
          EXPECT_EQ(b[k].gather_prefetched, previous_gather < b.size() && !after_same_unit) << k;
          for (std::size_t j = previous_gather; b[k].gather_prefetched && j < k; ++j) {
            EXPECT_EQ(b[j].prefetched_bytes, b[k].gathered_bytes) << j;
          }
          prefetched += b[k].gather_prefetched;
          ++gathered;
          previous_gather = k;
        }
        if (b[k].gathered_bytes == 0) EXPECT_EQ(b[k].transient_bytes - a[k].transient_bytes, b[k].prefetched_bytes) << k;
        kept += b[k].retained_bytes - a[k].retained_bytes;
        if (b[k].layer < 0 || trace.layers[static_cast<std::size_t>(b[k].layer)].trainable_param_bytes() == 0) {
          EXPECT_EQ(b[k].gathered_bytes, 0);
          EXPECT_EQ(b[k].kept_gathered_bytes, 0);
          continue;
        }
        const auto unit = static_cast<std::size_t>(unit_of(b[k].layer));
        const auto& gather = gathers[unit];
        // An op that reads its unit's parameters finds them held or gathers them; the gathering op
        // keeps them where a later op of the unit reads them, and that op lets them go.
        const bool reads = b[k].kind != planner::OpKind::Backward || gather.for_backward;
        if (b[k].gathered_bytes > 0) {
          EXPECT_FALSE(held[unit]) << k;
          EXPECT_EQ(b[k].transient_bytes - a[k].transient_bytes, gather.bytes + b[k].prefetched_bytes) << k;
          EXPECT_EQ(b[k].gathered_bytes, gather.bytes) << k;
          EXPECT_EQ(b[k].gather_ns, gather.ns) << k;
          held[unit] = true;
        } else {
          EXPECT_TRUE(held[unit] || !reads) << k;
        }
        EXPECT_TRUE(b[k].kept_gathered_bytes == 0 || std::abs(b[k].kept_gathered_bytes) == gather.bytes) << k;
        if (b[k].kept_gathered_bytes < 0 || (b[k].gathered_bytes > 0 && b[k].kept_gathered_bytes == 0)) held[unit] = false;
        const bool last_use = (b[k].kind == planner::OpKind::Backward && b[k].layer == gather.first_layer) ||
                              ((b[k].kind == planner::OpKind::Forward || b[k].kind == planner::OpKind::ForwardNoGrad) &&
                               b[k].layer == gather.last_layer);
        EXPECT_EQ(held[unit], reads && !last_use) << k;
      }
      EXPECT_EQ(kept, 0);  // every gather let go of within the micro-batch
      EXPECT_GT(prefetched, 0);
      // Each unit twice (the embedding once), however many of its layers hold parameters.
      EXPECT_EQ(gathered, 2 * with_parameters - 1);
    }
    for (const auto& c : {three, three_checkpointed}) {
      const auto predicted = planner::predict_step(costs, graph, c);
      const core::Schedule schedule = planner::build_schedule(costs, graph, c);
      // Each gather a task on the collective stream (every worker's lane), before its layer's work.
      std::int64_t gathers_ns = 0;
      for (const auto& task : schedule.tasks) {
        if (task.category != "gather") continue;
        EXPECT_EQ(task.stream, core::Stream::Collective);
        gathers_ns += task.duration_ns;
      }
      EXPECT_EQ(gathers_ns, planner::parameter_gather_step_ns(planner::step_sequence(costs, graph, c)));  // both listed
      const auto sim = simulator::simulate(schedule);
      EXPECT_EQ(sim.peak_bytes, predicted.peak_bytes);
      EXPECT_EQ(sim.makespan_ns, predicted.step_ns);
      // One communication thread runs the gathers and reduces in the order they start: a backward's
      // gather waits for the reduce queued before it.
      int reduce = -1, waited = 0;
      for (std::size_t t = 0; t < schedule.tasks.size(); ++t) {
        if (schedule.tasks[t].category == "reduce") reduce = static_cast<int>(t);
        if (schedule.tasks[t].category != "gather" || reduce < 0) continue;
        EXPECT_GE(sim.tasks[t].start_ns, sim.tasks[static_cast<std::size_t>(reduce)].end_ns);
        ++waited;
      }
      EXPECT_GT(waited, 0);
      // What the plan says the compute waits in the gathers (what a worker measures) is the
      // simulator's, each segment once: a task after a gather of its own waits from what the gather
      // followed; one after a prefetched gather, from what else it waits for, where the gather ends later.
      const auto seq = planner::step_sequence(costs, graph, c);
      std::int64_t planned_wait = 0, simulated_wait = 0;
      for (const auto& segment : seq.segments) planned_wait += planner::collective_waits(seq.ops[segment.ops], 0).gather_ns;
      const auto latest_end = [&](const std::vector<int>& tasks, int except) {
        std::int64_t end = 0;  // the step's start
        for (const int d : tasks) {
          if (d != except) end = std::max(end, sim.tasks[static_cast<std::size_t>(d)].end_ns);
        }
        return end;
      };
      std::vector<bool> after_a_layer_task(schedule.tasks.size(), false);  // a gather chained to the compute
      for (std::size_t t = 0; t < schedule.tasks.size(); ++t) {
        const auto& task = schedule.tasks[t];
        if (task.category == "gather" || task.category == "reduce") continue;
        for (const int d : task.dependencies) {
          const auto& gather = schedule.tasks[static_cast<std::size_t>(d)];
          if (gather.category != "gather") continue;
          const bool own = d == task.dependencies.front() && gather.dependencies.size() <= 1;
          simulated_wait += own ? sim.tasks[static_cast<std::size_t>(d)].end_ns - latest_end(gather.dependencies, -1)
                                : std::max<std::int64_t>(0, sim.tasks[static_cast<std::size_t>(d)].end_ns - latest_end(task.dependencies, d));
        }
      }
      EXPECT_EQ(planned_wait, simulated_wait);
      // Prefetched, the gathers keep the compute waiting less than each gathered as it is reached.
      for (const auto& segment : seq.segments) {
        auto unprefetched = seq.ops[segment.ops];
        for (auto& op : unprefetched) op.gather_prefetched = false;
        if (segment.batch == 0) continue;  // the optimizer's
        EXPECT_LT(planner::collective_waits(seq.ops[segment.ops], 0).gather_ns, planner::collective_waits(unprefetched, 0).gather_ns);
      }
      // Two units' parameters gathered at once: the one at work and the one prefetched.
      std::int64_t most_gathered = 0, two_at_once = 0;
      for (const auto& sample : sim.memory) {
        most_gathered = std::max(most_gathered, sample.bytes[static_cast<std::size_t>(core::MemoryKind::GatheredParameter)]);
      }
      const auto& ops = seq.ops[seq.segments.front().ops];
      for (const auto& op : ops) two_at_once = std::max(two_at_once, op.gathered_bytes + op.prefetched_bytes);
      EXPECT_GT(two_at_once, largest);
      EXPECT_GE(most_gathered, two_at_once);
    }
  }
  // Planned: where only stage 3 fits, auto takes it; its plan names its gathers and reads back.
  auto r = request(std::int64_t{1} << 20, 16, 2);
  r.strategies.insert(planner::Strategy::Tempo);
  const auto none = planner::plan_step(trace, r);
  ASSERT_FALSE(none.plan);
  // Stage 3 twice: gathering per block and per layer.
  ASSERT_EQ(none.shard_stages.size(), 5u);
  const auto& per_block = none.shard_stages[3];
  const auto& per_layer = none.shard_stages[4];
  EXPECT_EQ(per_block.gather, core::GatherUnit::Block);
  EXPECT_EQ(per_layer.gather, core::GatherUnit::Layer);
  EXPECT_FALSE(none.shard_stages[2].gather);
  // Less in flight per layer; here the head's parameters, gathered alone either way, set the least.
  EXPECT_EQ(per_layer.smallest_budget, per_block.smallest_budget);
  EXPECT_LT(per_block.smallest_budget, none.shard_stages[2].smallest_budget);
  EXPECT_LT(per_block.static_bytes, none.shard_stages[2].static_bytes);
  EXPECT_NE(none.reason.find("at stage 3 (optimizer state, gradients and parameters sharded), per block, the stage that needs the least"),
            std::string::npos)
      << none.reason;
  EXPECT_NE(none.reason.find("parameters sharded), per layer at least"), std::string::npos) << none.reason;
  r.budget_bytes = per_layer.smallest_budget;
  const auto outcome = planner::plan_step(trace, r);
  ASSERT_TRUE(outcome.plan) << outcome.reason;
  EXPECT_EQ(outcome.plan->choice.data_parallel->shard_stage, 3);
  EXPECT_LE(outcome.plan->predicted.peak_bytes, r.budget_bytes);
  {
    // BERT-large's blocks hold 50 MB of parameters each, its largest layer 16 MB: per layer needs
    // less, and at its least the plan gathers per layer.
    core::Trace bert_large = committed("cpu-bert-large.json");
    bert_large.optimizer.largest_param_elements = 1 << 22;
    auto at = r;
    at.budget_bytes = 1;
    at.shard_stage = 3;
    const auto rows = planner::plan_step(bert_large, at).shard_stages;
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_LT(rows[1].smallest_budget, rows[0].smallest_budget);
    at.budget_bytes = rows[1].smallest_budget;
    const auto layered = planner::plan_step(bert_large, at);
    ASSERT_TRUE(layered.plan) << layered.reason;
    EXPECT_EQ(layered.plan->choice.data_parallel->gather, core::GatherUnit::Layer);
    EXPECT_EQ(core::plan_from_json(core::to_json(*layered.plan)), *layered.plan);
  }
  // Where both fit, the faster; the rows set them side by side.
  auto roomy = r;
  roomy.budget_bytes = per_block.smallest_budget + (std::int64_t{4} << 20);
  roomy.shard_stage = 3;
  const auto both = planner::plan_step(trace, roomy);
  ASSERT_TRUE(both.plan) << both.reason;
  ASSERT_EQ(both.shard_stages.size(), 2u);
  ASSERT_TRUE(both.shard_stages[0].predicted && both.shard_stages[1].predicted);
  const bool block_faster = both.shard_stages[0].predicted->samples_per_second >= both.shard_stages[1].predicted->samples_per_second;
  EXPECT_EQ(both.plan->choice.data_parallel->gather, block_faster ? core::GatherUnit::Block : core::GatherUnit::Layer);
  EXPECT_EQ(both.plan->predicted, *both.shard_stages[block_faster ? 0 : 1].predicted);
  roomy.gather = core::GatherUnit::Layer;
  EXPECT_EQ(planner::plan_step(trace, roomy).plan->choice.data_parallel->gather, core::GatherUnit::Layer);
  EXPECT_TRUE(outcome.plan->predicted_part(core::kParameterGatherSecondsPart));
  EXPECT_TRUE(outcome.plan->predicted_part(core::kExposedParameterGatherSecondsPart));
  EXPECT_FALSE(outcome.plan->predicted_part(core::kParameterBroadcastSecondsPart).value_or(0) > 0);
  EXPECT_EQ(core::plan_from_json(core::to_json(*outcome.plan)), *outcome.plan);
  planner::check_choice(*outcome.plan, trace, "p.json");
}

TEST(DataParallelPlan, ShardStagesItCannotRunAreRefused) {
  const core::Trace trace = committed("cpu-gpt.json");
  const auto refusal = [&](planner::PlanRequest r) {
    try {
      planner::plan_step(trace, r);
    } catch (const core::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto one = request(1LL << 34, 16, 1);
  one.shard_stage = 1;
  EXPECT_NE(refusal(one).find("shard_stage: stage 1 shards the training state over data-parallel workers"), std::string::npos)
      << refusal(one);
  auto unknown = request(1LL << 34, 16, 2);
  unknown.shard_stage = core::kMaxShardStage + 1;
  EXPECT_NE(refusal(unknown).find("expected a stage from 0 to"), std::string::npos) << refusal(unknown);
  auto l2l = request(1LL << 34, 16, 2);
  l2l.shard_stage = 1;
  l2l.strategies.insert(planner::Strategy::L2L);
  EXPECT_NE(refusal(l2l).find("cannot combine with l2l"), std::string::npos) << refusal(l2l);
  core::Trace bf16 = trace;
  bf16.precision = core::Precision::Bf16;
  auto sharded = request(1LL << 34, 16, 2);
  sharded.shard_stage = 1;
  try {
    planner::plan_step(bf16, sharded);
    FAIL() << "expected an InputError";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot combine with bf16"), std::string::npos) << e.what();
  }
  // Left to the search, a bf16 trace is planned at the stage it can run.
  sharded.shard_stage.reset();
  const auto outcome = planner::plan_step(bf16, sharded);
  ASSERT_TRUE(outcome.plan);
  EXPECT_EQ(outcome.plan->choice.data_parallel->shard_stage, 0);
  // A plan file that shards a bf16 trace.
  auto plan = *planner::plan_step(trace, request(1LL << 34, 16, 2)).plan;
  plan.choice.data_parallel->shard_stage = 1;
  EXPECT_THROW(planner::check_choice(plan, bf16, "p.json"), core::InputError);
  auto document = core::to_json(plan);
  document["data_parallel"]["shard_stage"] = core::kMaxShardStage + 1;
  EXPECT_THROW(core::plan_from_json(document), core::InputError);
}

}  // namespace
}  // namespace headroom
