// The planner's technique interface (planner/technique.h): every strategy-table entry registered in
// the table's order, data parallel and its ring loss beside them, each technique saying whether a choice uses it and
// refusing by name what the trace cannot run, L2L running its step its own way, and the parts of a
// step and the lines of a plan's summary each adds.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/errors.h"
#include "core/plan.h"
#include "core/l2l_stages.h"
#include "planner/data_parallel_model.h"
#include "planner/l2l_model.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "planner/technique.h"
#include "report/plan_report.h"
#include "support/build_paths.h"
#include "support/trace_fixture.h"

namespace headroom {
namespace {

using planner::Strategy;

TEST(Technique, EveryTableEntryIsRegisteredInItsOrderThenTheOthers) {
  const auto all = planner::techniques();
  const auto table = planner::strategy_table();
  ASSERT_EQ(all.size(), table.size() + 2);
  for (std::size_t i = 0; i < table.size(); ++i) EXPECT_EQ(all[i]->strategy(), table[i].id);
  // Asked for by the request's workers (and the model's contrastive loss), not by --strategies.
  EXPECT_EQ(all[table.size()], &planner::data_parallel_technique());
  EXPECT_EQ(all[table.size() + 1], &planner::ring_loss_technique());
  for (std::size_t i = table.size(); i < all.size(); ++i) EXPECT_FALSE(all[i]->strategy());
}

TEST(Technique, EachSaysWhetherAChoiceUsesIt) {
  core::StepChoice plain;
  plain.micro_batches = {8};
  for (const planner::Technique* t : planner::techniques()) EXPECT_FALSE(t->used_by(plain));

  core::StepChoice split = plain.with_micro_batches({4, 4});
  EXPECT_TRUE(planner::micro_batching_technique().used_by(split));
  // With workers, worker 0's micro-batches count: one each is no micro-batching.
  core::StepChoice workers = split;
  workers.data_parallel = core::DataParallelChoice{2, {1, 1}, {}, core::kDefaultBucketCapBytes};
  EXPECT_FALSE(planner::micro_batching_technique().used_by(workers));
  EXPECT_TRUE(planner::data_parallel_technique().used_by(workers));
  EXPECT_FALSE(planner::ring_loss_technique().used_by(workers));
  core::StepChoice ring = workers;
  ring.ring_loss = true;
  EXPECT_TRUE(planner::ring_loss_technique().used_by(ring));

  core::StepChoice checkpointed = plain;
  checkpointed.checkpointed_blocks = {0};
  EXPECT_TRUE(planner::checkpointing_technique().used_by(checkpointed));
  core::StepChoice tempo = plain;
  tempo.set_variant(2, core::LayerVariant::Tempo);
  EXPECT_TRUE(planner::tempo_technique().used_by(tempo));
  core::StepChoice tiled = plain;
  tiled.loss_tiles = core::LossTiles{4, 4};
  EXPECT_TRUE(planner::infcl_technique().used_by(tiled));
  core::StepChoice with_l2l = plain;
  with_l2l.l2l = core::L2LChoice{};
  EXPECT_TRUE(planner::l2l_technique().used_by(with_l2l));

  // Only L2L runs the whole step its own way.
  EXPECT_EQ(planner::step_runner(with_l2l), &planner::l2l_technique());
  EXPECT_EQ(planner::step_runner(split), nullptr);
}

TEST(Technique, EachRefusesByNameWhatTheTraceCannotRun) {
  const core::Trace trace = testing::make_small_trace();
  const planner::LayerGraph graph(trace);
  const std::string source = "plan.json";
  const auto refusal = [&](const planner::Technique& t, const core::StepChoice& choice) {
    try {
      t.check({trace, graph, choice, source});
    } catch (const core::InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  core::StepChoice choice;
  choice.micro_batches = {4};
  for (const planner::Technique* t : planner::techniques()) EXPECT_EQ(refusal(*t, choice), "");

  core::StepChoice checkpointed = choice;
  checkpointed.checkpointed_blocks = {99};
  EXPECT_EQ(refusal(planner::checkpointing_technique(), checkpointed), "plan.json: $.checkpointed_blocks: the trace has no block 99");
  core::StepChoice tiled = choice;
  tiled.loss_tiles = core::LossTiles{4, 4};
  EXPECT_NE(refusal(planner::infcl_technique(), tiled).find("has no contrastive loss to tile"), std::string::npos);
  core::StepChoice with_l2l = choice;
  with_l2l.l2l = core::L2LChoice{};
  with_l2l.data_parallel = core::DataParallelChoice{};
  EXPECT_NE(refusal(planner::l2l_technique(), with_l2l).find("L2L with data parallel"), std::string::npos);
  core::StepChoice uneven = choice.with_micro_batches({2, 6});
  uneven.data_parallel = core::DataParallelChoice{2, {1, 1}, {}, core::kDefaultBucketCapBytes};
  EXPECT_NE(refusal(planner::data_parallel_technique(), uneven).find("worker 1 carries more than worker 0"), std::string::npos);
  core::StepChoice alone = choice;
  alone.data_parallel = core::DataParallelChoice{1, {1}, {}, core::kDefaultBucketCapBytes};
  EXPECT_EQ(refusal(planner::data_parallel_technique(), alone), "plan.json: $.world_size: data parallel needs at least 2 workers, got 1");
  core::StepChoice ring_alone = choice;
  ring_alone.ring_loss = true;
  EXPECT_EQ(refusal(planner::ring_loss_technique(), ring_alone),
            "plan.json: $.ring_loss: the ring runs across data-parallel workers; the plan has one");
  core::StepChoice ring = uneven.with_micro_batches({4, 4});
  ring.ring_loss = true;
  EXPECT_NE(refusal(planner::ring_loss_technique(), ring).find("has no contrastive loss to run as a ring"), std::string::npos);
}

// The ring loss is its own field, set by the planner wherever a contrastive model runs on several
// workers and nowhere else; a plan file carries it, and a data-parallel plan of a contrastive model
// without it (an older headroom's) is refused rather than run with each worker's loss alone.
TEST(Technique, TheRingLossIsChosenForAContrastiveModelOnSeveralWorkers) {
  const auto trace_of = [](const std::string& name) {
    return core::read_trace_file(std::filesystem::path(HEADROOM_TRACES_DIR) / name);
  };
  const core::Trace clip = trace_of("cpu-clip.json"), bert = trace_of("cpu-bert.json");
  const auto request = [](std::int64_t batch, int workers) {
    planner::PlanRequest r;
    r.global_batch = batch;
    r.budget_bytes = std::int64_t{4} << 30;
    r.strategies = planner::parse_strategies("all", workers);
    r.workers = workers;
    r.link = core::parse_link("1GB/s,20us");
    r.trace_path = "t.json";
    r.trace_sha256 = std::string(64, '0');
    return r;
  };
  const auto clip_on_two = planner::plan_step(clip, request(256, 2));
  ASSERT_TRUE(clip_on_two.plan) << clip_on_two.reason;
  EXPECT_TRUE(clip_on_two.plan->choice.ring_loss);
  EXPECT_EQ(core::to_json(*clip_on_two.plan).at("ring_loss"), true);
  EXPECT_EQ(core::plan_from_json(core::to_json(*clip_on_two.plan), "p.json").choice, clip_on_two.plan->choice);
  const auto clip_alone = planner::plan_step(clip, request(256, 1));
  ASSERT_TRUE(clip_alone.plan) << clip_alone.reason;
  EXPECT_FALSE(clip_alone.plan->choice.ring_loss);
  EXPECT_FALSE(core::to_json(*clip_alone.plan).contains("ring_loss"));
  const auto bert_on_two = planner::plan_step(bert, request(16, 2));
  ASSERT_TRUE(bert_on_two.plan) << bert_on_two.reason;
  EXPECT_FALSE(bert_on_two.plan->choice.ring_loss);

  core::Plan older = *clip_on_two.plan;
  older.choice.ring_loss = false;
  try {
    planner::check_choice(older, clip, "old.json");
    ADD_FAILURE() << "a data-parallel clip plan without the ring was accepted";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("old.json: $.ring_loss: a data-parallel plan of a contrastive model"), std::string::npos)
        << e.what();
  }
}

planner::PlanRequest bert_request(std::int64_t budget, const std::string& strategies, int workers = 1) {
  planner::PlanRequest request;
  request.global_batch = 16;
  request.budget_bytes = budget;
  request.strategies = planner::parse_strategies(strategies, workers);
  request.workers = workers;
  request.link = core::parse_link("1GB/s,20us");
  request.trace_path = "traces/cpu-bert.json";
  request.trace_sha256 = std::string(64, '0');
  return request;
}

// A plan carries what execute's report compares beside its measurements, from the technique that
// adds the part: L2L's lanes and host peak, data parallel's all-reduce; a plan with neither, none.
TEST(Technique, APlanCarriesThePartsItsTechniquesPredict) {
  const core::Trace trace = core::read_trace_file(std::filesystem::path(HEADROOM_TRACES_DIR) / "cpu-bert.json");
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);

  const auto plain = planner::plan_step(trace, bert_request(std::int64_t{1} << 30, "all"));
  ASSERT_TRUE(plain.plan);
  EXPECT_TRUE(plain.plan->predicted_parts.empty());

  // The least any plan needs: below what anything but L2L reaches.
  const std::int64_t least = planner::plan_step(trace, bert_request(1, "all")).smallest_budget;
  const auto with_l2l = planner::plan_step(trace, bert_request(least, "all"));
  ASSERT_TRUE(with_l2l.plan && with_l2l.plan->choice.l2l) << with_l2l.reason;
  const auto& plan = *with_l2l.plan;
  const planner::L2LPrediction p = planner::predict_l2l_step(costs, graph, plan.choice.micro_batches, *plan.choice.l2l);
  EXPECT_EQ(plan.predicted_part(core::kL2LHostBytesPart), static_cast<double>(p.host_bytes));
  EXPECT_EQ(plan.predicted_part(core::kL2LComputeSecondsPart), static_cast<double>(p.compute_ns) * 1e-9);
  EXPECT_EQ(plan.predicted_part(core::kL2LCopySecondsPart), static_cast<double>(p.copy_ns) * 1e-9);
  EXPECT_EQ(plan.predicted_part(core::kL2LHostOptimizerSecondsPart), static_cast<double>(p.host_optimizer_ns) * 1e-9);
  ASSERT_TRUE(plan.predicted_part(core::kL2LWaitSecondsPart));
  EXPECT_FALSE(plan.predicted_part(core::kAllReduceSecondsPart));
  EXPECT_NE(report::render_plan_summary(plan).find("  l2l              "), std::string::npos);

  const auto parallel = planner::plan_step(trace, bert_request(std::int64_t{1} << 30, "all", 2));
  ASSERT_TRUE(parallel.plan) << parallel.reason;
  const auto allreduce = parallel.plan->predicted_part(core::kAllReduceSecondsPart);
  const auto exposed = parallel.plan->predicted_part(core::kExposedAllReduceSecondsPart);
  ASSERT_TRUE(allreduce && exposed);
  // bert mini's gradients (about 18 MiB) over 1 GB/s: tens of milliseconds, some of it hidden.
  EXPECT_GT(*allreduce, 0.01);
  EXPECT_LE(*exposed, *allreduce);
  EXPECT_FALSE(parallel.plan->predicted_part(core::kL2LHostBytesPart));
  const std::string summary = report::render_plan_summary(*parallel.plan);
  EXPECT_NE(summary.find("  data parallel    2 workers: workers 0-1 8 samples as"), std::string::npos) << summary;
  EXPECT_NE(summary.find("  checkpointed     "), std::string::npos);
  EXPECT_NE(summary.find("  tempo            "), std::string::npos);
}

}  // namespace
}  // namespace headroom
