#include <gtest/gtest.h>

#include "core/l2l_stages.h"

namespace headroom {
namespace {

// Embeddings outside any block, two blocks, a head outside any: four stages. Block 1 reads block
// 0's last layer and the embeddings (a residual across stages); the head reads block 1.
TEST(L2LStages, AreRunsOfOneBlockWithWhatCrossesBetweenThem) {
  const std::vector<int> blocks = {-1, 0, 0, 1, 1, -1};
  const std::vector<std::vector<int>> inputs = {{-1}, {0}, {1}, {2, 0}, {3, 0}, {4, -2}};
  const core::L2LStages formed = core::l2l_stages(blocks, inputs);
  ASSERT_EQ(formed.stages.size(), 4u);
  EXPECT_EQ(formed.stages[1].first, 1);
  EXPECT_EQ(formed.stages[1].last, 2);
  EXPECT_EQ(formed.stages[2].inputs, (std::vector<int>{2, 0}));  // in the order its layers read them, once each
  EXPECT_EQ(formed.stages[0].exports, (std::vector<int>{0}));
  EXPECT_EQ(formed.stages[3].inputs, (std::vector<int>{4}));     // the target (-2) is not a layer
  EXPECT_EQ(formed.stage_of, (std::vector<int>{0, 1, 1, 2, 2, 3}));
  EXPECT_EQ(formed.first_reader, (std::vector<int>{1, -1, 2, -1, 3, -1}));

  EXPECT_EQ(core::first_offloaded_stage(formed.stages, blocks, core::L2LChoice::kWholeModel), 0);
  EXPECT_EQ(core::first_offloaded_stage(formed.stages, blocks, 1), 2);
  EXPECT_EQ(core::first_offloaded_stage(formed.stages, blocks, 7), -1);
}

TEST(L2LStages, RefuseWhatNoModelCanBe) {
  EXPECT_THROW(core::l2l_stages({0, 0}, {{-1}}), std::logic_error);
  EXPECT_THROW(core::l2l_stages({0, 1}, {{1}, {0}}), std::logic_error);  // reads a later layer
}

}  // namespace
}  // namespace headroom
