#include <gtest/gtest.h>

#include <numeric>

#include "core/errors.h"
#include "planner/layer_graph.h"
#include "support/plan_requests.h"
#include "support/synthetic_chain.h"

namespace headroom {
namespace {

using testing::committed;

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

TEST(LayerGraph, RejectsABlockThatComesBack) {
  core::Trace trace = testing::synthetic_chain(12);
  trace.layers[9].block = 0;  // blocks 0,0,0,0,1,1,1,1,2,0,2,2
  EXPECT_THROW(planner::LayerGraph{trace}, core::InputError);
}

}  // namespace
}  // namespace headroom
