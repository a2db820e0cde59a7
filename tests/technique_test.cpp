// The planner's technique interface (planner/technique.h): every strategy-table entry registered in
// the table's order, data parallel beside them, each technique saying whether a choice uses it and
// refusing by name what the trace cannot run, and L2L running its step its own way.
#include <gtest/gtest.h>

#include <string>

#include "core/errors.h"
#include "planner/technique.h"
#include "trace_fixture.h"

namespace headroom {
namespace {

using planner::Strategy;

TEST(Technique, EveryTableEntryIsRegisteredInItsOrderThenTheOthers) {
  const auto all = planner::techniques();
  const auto table = planner::strategy_table();
  ASSERT_EQ(all.size(), table.size() + 1);
  for (std::size_t i = 0; i < table.size(); ++i) EXPECT_EQ(all[i]->strategy(), table[i].id);
  EXPECT_FALSE(all.back()->strategy());  // data parallel: asked for by the request's workers
  EXPECT_EQ(all.back(), &planner::data_parallel_technique());
}

TEST(Technique, EachSaysWhetherAChoiceUsesIt) {
  core::StepChoice plain;
  plain.micro_batches = {8};
  for (const planner::Technique* t : planner::techniques()) EXPECT_FALSE(t->used_by(plain));

  core::StepChoice split = plain.with_micro_batches({4, 4});
  EXPECT_TRUE(planner::micro_batching_technique().used_by(split));
  // With workers, worker 0's micro-batches count: one each is no micro-batching.
  core::StepChoice workers = split;
  workers.world_size = 2;
  workers.micro_batches_per_worker = {1, 1};
  EXPECT_FALSE(planner::micro_batching_technique().used_by(workers));
  EXPECT_TRUE(planner::data_parallel_technique().used_by(workers));

  core::StepChoice checkpointed = plain;
  checkpointed.checkpointed_blocks = {0};
  EXPECT_TRUE(planner::checkpointing_technique().used_by(checkpointed));
  core::StepChoice lean = plain;
  lean.set_variant(2, core::LayerVariant::Tempo);
  EXPECT_TRUE(planner::tempo_technique().used_by(lean));
  core::StepChoice tiled = plain;
  tiled.loss_tiles = core::LossTiles{4, 4};
  EXPECT_TRUE(planner::infcl_technique().used_by(tiled));
  core::StepChoice relayed = plain;
  relayed.l2l = core::RelayChoice{};
  EXPECT_TRUE(planner::l2l_technique().used_by(relayed));

  // Only the relay runs the whole step its own way.
  EXPECT_EQ(planner::step_runner(relayed), &planner::l2l_technique());
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
  core::StepChoice relayed = choice;
  relayed.l2l = core::RelayChoice{};
  relayed.world_size = 2;
  EXPECT_NE(refusal(planner::l2l_technique(), relayed).find("L2L with data parallel"), std::string::npos);
  core::StepChoice uneven = choice.with_micro_batches({2, 6});
  uneven.world_size = 2;
  uneven.micro_batches_per_worker = {1, 1};
  EXPECT_NE(refusal(planner::data_parallel_technique(), uneven).find("worker 1 carries more than worker 0"), std::string::npos);
}

}  // namespace
}  // namespace headroom
