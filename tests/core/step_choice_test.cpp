#include <gtest/gtest.h>

#include "core/collective.h"
#include "core/plan.h"
#include "core/step_choice.h"

namespace headroom {
namespace {

// The step choice: variants by name, micro-batches swapped without touching the rest, and a world
// size that the plan file keeps (written only when it is not 1, so plans of one replica read as before).
TEST(StepChoice, VariantsMicroBatchesAndWorldSize) {
  for (const auto v : {core::LayerVariant::Standard, core::LayerVariant::Tempo}) {
    EXPECT_EQ(core::variant_named(core::variant_name(v)), v);
  }
  EXPECT_FALSE(core::variant_named("lean"));
  EXPECT_EQ(core::variant_names(), "standard or tempo");

  core::StepChoice choice;
  choice.set_variant(2, core::LayerVariant::Tempo);
  ASSERT_EQ(choice.layers.size(), 3u);
  EXPECT_EQ(choice.layers[1].id, 1);
  EXPECT_TRUE(choice.is_tempo(2));
  EXPECT_FALSE(choice.is_tempo(0));
  EXPECT_FALSE(choice.is_tempo(7));  // past the entries: standard
  EXPECT_EQ(choice.tempo_count(), 1);
  const auto other = choice.with_micro_batches({3, 2});
  EXPECT_EQ(other.samples(), 5);
  EXPECT_EQ(other.layers, choice.layers);

  core::Plan plan;
  plan.trace_path = "t.json";
  plan.trace_sha256 = std::string(64, '0');
  plan.budget_bytes = 1 << 30;
  plan.global_batch = 4;
  plan.choice.micro_batches = {4};
  EXPECT_FALSE(core::to_json(plan).contains("world_size"));
  // Data parallel: every worker's micro-batches, and how many are whose.
  plan.global_batch = 9;
  plan.choice.micro_batches = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  plan.choice.data_parallel = core::DataParallelChoice{8, {2, 1, 1, 1, 1, 1, 1, 1}, core::parse_link("25GB/s,5us"), 1 << 20};
  const auto document = core::to_json(plan);
  EXPECT_EQ(document.at("world_size"), 8);
  EXPECT_EQ(document.at("data_parallel").at("micro_batches_per_worker").size(), 8u);
  EXPECT_EQ(core::plan_from_json(document), plan);
  EXPECT_EQ(plan.choice.worker_micro_batches(0), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(plan.choice.first_micro_batch(3), 4u);
}

}  // namespace
}  // namespace headroom
