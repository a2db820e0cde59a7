#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "core/cost_model.h"
#include "core/trace.h"
#include "support/build_paths.h"
#include "support/trace_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

core::Trace committed(const std::string& name) {
  return core::read_trace_file(fs::path(HEADROOM_TRACES_DIR) / name);
}

TEST(CostModel, ExactAtSamplesInterpolatedBetween) {
  const core::Trace trace = committed("cpu-bert.json");
  const core::CostModel costs(trace);
  for (std::size_t k = 0; k < trace.batch_sizes.size(); ++k) {
    const std::int64_t b = trace.batch_sizes[k];
    // A trace with sequences charges a micro-batch what a later one in the step measured; one
    // without, the profiled step less its optimizer.
    const auto& step = trace.steps[k];
    EXPECT_EQ(costs.micro_batch_ns(b), step.sequence ? step.sequence->micro_batch_ns : step.step_ns - step.optimizer_ns);
    for (std::size_t i = 0; i < trace.layers.size(); ++i) {
      const auto& s = trace.layers[i].samples[k];
      const auto c = costs.layer(i, b);
      EXPECT_EQ(c.kept_bytes, s.kept_bytes) << trace.layers[i].name;
      EXPECT_EQ(c.fwd_ns, s.fwd_ns) << trace.layers[i].name;
    }
  }
  // Between two samples time is on the line between them; past the last it goes on along the line
  // through the last two.
  const std::size_t n = trace.batch_sizes.size();
  const std::int64_t b1 = trace.batch_sizes[n - 2], b2 = trace.batch_sizes[n - 1];
  const auto t1 = costs.micro_batch_ns(b1), t2 = costs.micro_batch_ns(b2);
  EXPECT_NEAR(costs.micro_batch_ns((b1 + b2) / 2), t1 + (t2 - t1) * ((b1 + b2) / 2 - b1) / (b2 - b1), 1);
  EXPECT_NEAR(costs.micro_batch_ns(2 * b2), t2 + std::max<std::int64_t>(0, t2 - t1) * b2 / (b2 - b1), 1);
}

// A convolution's scratch memory is not a line in the batch (oneDNN at two threads): between two
// profiled sizes the transient bytes are bounded by the line plus what a jump in a segment steeper
// than the layer's median slope can add, while a layer whose bytes are a line stays exactly on it.
TEST(CostModel, AnIrregularTransientIsBoundedBetweenProfiledSizes) {
  core::Trace trace = testing::make_small_trace();
  // clip's image.conv2 backward as profiled at two threads, and what it held at 24 and 26.
  const std::vector<std::int64_t> conv_bwd = {346112, 673792, 1356032, 2666752};
  const std::int64_t held_at_24 = 1028352, held_at_26 = 1110272;
  testing::resample(trace, {8, 16, 32, 64}, [&](const core::LayerProfile& layer, std::size_t k, core::LayerSample& s) {
    s.fwd_transient_bytes *= s.batch;
    s.bwd_transient_bytes = layer.name == "fc" ? conv_bwd[k] : s.bwd_transient_bytes * s.batch;
  });
  const core::CostModel costs(trace);
  for (std::size_t k = 0; k < trace.batch_sizes.size(); ++k) EXPECT_EQ(costs.layer(0, trace.batch_sizes[k]).bwd_transient_bytes, conv_bwd[k]);
  const auto line = [&](std::int64_t b) { return conv_bwd[1] + (conv_bwd[2] - conv_bwd[1]) * (b - 16) / 16; };
  for (const auto& [b, held] : {std::pair{24, held_at_24}, std::pair{26, held_at_26}}) {
    const auto predicted = costs.layer(0, b).bwd_transient_bytes;
    EXPECT_LT(line(b), held) << b;  // the line alone was under
    EXPECT_GE(predicted, held) << b;
    // Not more than the jump (its segment is 26,880 bytes steeper than the others over its width)
    // times the distance still to go to the segment's end.
    EXPECT_LE(predicted, line(b) + 26880 * (32 - b) / 16) << b;
  }
  // The gelu's bytes are a line: nothing added.
  EXPECT_EQ(costs.layer(1, 24).bwd_transient_bytes, trace.layers[1].samples[0].bwd_transient_bytes * 3);
  // On the line (what a plan weighs its bound against): the line itself, and the same at the
  // profiled sizes and for a layer whose bytes are a line.
  const core::CostModel on_the_line(trace, core::CostModel::Between::Line);
  EXPECT_EQ(on_the_line.layer(0, 24).bwd_transient_bytes, line(24));
  EXPECT_EQ(on_the_line.layer(0, 26).bwd_transient_bytes, line(26));
  for (const std::int64_t b : trace.batch_sizes) EXPECT_EQ(on_the_line.layer(0, b).bwd_transient_bytes, costs.layer(0, b).bwd_transient_bytes);
  EXPECT_EQ(on_the_line.layer(1, 24).bwd_transient_bytes, costs.layer(1, 24).bwd_transient_bytes);
}

// bfloat16 matrix products' backward scratch grows in blocks of 4 samples (clip's
// text.layer0.attn_out: 3,456 + 10,240 x ceil(b/4) bytes). Profiled at 1, 2, 4, 8, ... it looks like a
// flat run and then a line, and the line was under it between samples (16,256 bytes at 5 where it
// held 23,936); it is now bounded by its value at the next multiple of 4, exact where the staircase
// is. The block is the product kernels': every matrix product's backward transient is held to it
// (not at a profiled size, which is measured), while a forward, or a layer of another kind, keeps
// its own; a transient that is flat and then rises off the later segments' line is not a
// staircase and stays on the line.
TEST(CostModel, ATransientAllocatedInBlocksOfSamplesIsBoundedBetweenProfiledSizes) {
  core::Trace trace = testing::make_small_trace();
  trace.layers[1].name = "fc2";
  trace.layers[1].kind = "linear";
  const auto staircase = [](std::int64_t b) { return 3456 + 10240 * ((b + 3) / 4); };
  // A constant scratch overtaken by one of 4,096 bytes a sample from 8 on: the line between samples
  // is above it, and rounding up would add to that.
  const auto overtaken = [](std::int64_t b) { return std::max<std::int64_t>(20000, 4096 * b); };
  const auto line = [](std::int64_t b) { return 1000 * b + 16; };
  testing::resample(trace, {1, 2, 4, 8, 16, 32}, [&](const core::LayerProfile& layer, std::size_t, core::LayerSample& s) {
    const std::int64_t b = s.batch;
    s.fwd_transient_bytes = layer.name == "fc" ? line(b) : staircase(b);
    s.bwd_transient_bytes = layer.name == "fc" ? staircase(b) : layer.name == "fc2" ? line(b) : overtaken(b);
  });
  ASSERT_EQ(trace.layers[2].kind, "loss");
  const core::CostModel costs(trace);
  EXPECT_LT(23936 + 2560 * (5 - 8), staircase(5));  // the line through the samples from 4 on
  const auto profiled = [&](std::int64_t b) { return b == 1 || b == 2 || b == 4 || b == 8 || b == 16 || b == 32; };
  for (std::int64_t b = 1; b <= 40; ++b) {
    // The staircase itself; past the last size, the line through the last two plus what a block
    // adds above it at most (3 samples' worth), so the planner's last range stays affine.
    const std::int64_t stepped = b <= 32 ? staircase(b) : staircase(32) + 2560 * (b - 32) + 3 * 2560;
    EXPECT_GE(stepped, staircase(b)) << b;
    EXPECT_EQ(costs.layer(0, b).bwd_transient_bytes, stepped) << b;
    // The other product's backward, a line, at the next multiple of the block where not measured.
    EXPECT_EQ(costs.layer(1, b).bwd_transient_bytes, b <= 32 ? line(profiled(b) ? b : (b + 3) / 4 * 4) : line(b) + 3 * 1000) << b;
    // Forwards keep their own: a line stays one, a staircase is one.
    EXPECT_EQ(costs.layer(0, b).fwd_transient_bytes, line(b)) << b;
    EXPECT_EQ(costs.layer(1, b).fwd_transient_bytes, stepped) << b;
    // So does another kind.
    EXPECT_EQ(costs.layer(2, b).fwd_transient_bytes, stepped) << b;
    EXPECT_GE(costs.layer(2, b).bwd_transient_bytes, overtaken(b)) << b;
  }
  EXPECT_EQ(costs.layer(2, 5).bwd_transient_bytes, 20000 + (overtaken(8) - 20000) / 4);
  // On the line no block applies: between 4 and 8 the staircase's bytes are read on the line
  // through them, under what runs at 5 (what a plan's bound is weighed against), and no range is
  // cut at a block's multiples.
  const core::CostModel on_the_line(trace, core::CostModel::Between::Line);
  EXPECT_TRUE(on_the_line.blocks().empty());
  EXPECT_EQ(on_the_line.layer(0, 5).bwd_transient_bytes, staircase(4) + (staircase(8) - staircase(4)) / 4);
  EXPECT_EQ(on_the_line.layer(1, 5).bwd_transient_bytes, line(5));
  EXPECT_EQ(on_the_line.layer(0, 16).bwd_transient_bytes, staircase(16));
}

// A block is read at the next multiple, or at the next profiled size where that comes first (a
// block of 8 from a run flat through 8, profiled at 12 and 16: 9 reads 12's bytes, 13 reads 16's);
// a transient that falls anywhere gets no block of its own nor the products' (the next multiple's
// bytes would not bound it); blocks() lists the blocks in use.
TEST(CostModel, ABlockIsReadUpToTheNextProfiledSizeAndNeverForAFallingTransient) {
  core::Trace trace = testing::make_small_trace();
  trace.layers[1].name = "fc2";
  trace.layers[1].kind = "linear";
  const auto stepped = [](std::int64_t b) { return b <= 8 ? 50000 : 50000 + 3000 * (b - 8); };
  const auto falling = [](std::int64_t b) { return b == 12 ? 50000 : 30000 + 1000 * b; };
  testing::resample(trace, {1, 2, 4, 8, 12, 16}, [&](const core::LayerProfile& layer, std::size_t, core::LayerSample& s) {
    const std::int64_t b = s.batch;
    s.bwd_transient_bytes = layer.name == "fc" ? stepped(b) : layer.name == "fc2" ? falling(b) : 100 * b;
  });
  const core::CostModel costs(trace);
  EXPECT_EQ(costs.blocks(), std::vector<std::int64_t>{8});
  EXPECT_EQ(costs.layer(0, 9).bwd_transient_bytes, stepped(12));
  EXPECT_EQ(costs.layer(0, 13).bwd_transient_bytes, stepped(16));
  EXPECT_EQ(costs.layer(0, 5).bwd_transient_bytes, stepped(8));
  // fc2 rises from 8 to 12 and falls from 12 to 16: not read at the next multiple (12's bytes at 9,
  // 16's, below the line, at 14).
  EXPECT_LT(costs.layer(1, 9).bwd_transient_bytes, falling(12));
  EXPECT_EQ(costs.layer(1, 14).bwd_transient_bytes, (falling(12) + falling(16)) / 2);
}

// A trace whose steps were measured as sequences of micro-batches: a micro-batch costs what the
// later ones measured, and what a step pays once (optimizer, zeroing, the first micro-batch's
// extra) is charged through optimizer_ns, once per step.
TEST(CostModel, SequencesGiveMicroBatchTimeAndWhatAStepPaysOnce) {
  core::Trace trace = testing::make_small_trace();
  trace.steps[0].sequence = core::StepSequence{.micro_batch_ns = 7000, .first_micro_batch_ns = 7400, .zero_grad_ns = 30};
  trace.steps[1].sequence = core::StepSequence{.micro_batch_ns = 12000, .first_micro_batch_ns = 12400, .zero_grad_ns = 30};
  const core::CostModel costs(trace);
  EXPECT_EQ(costs.micro_batch_ns(1), 7000);
  EXPECT_EQ(costs.micro_batch_ns(2), 12000);
  EXPECT_EQ(costs.optimizer_ns(), 500 + 30 + 400);
  // Layer times (3000 ns per sample over the three layers) are scaled to the sequence's micro-batch.
  EXPECT_DOUBLE_EQ(costs.layer_time_scale(2), 12000.0 / (3 * 6000));

  // The same trace without sequences: the profiled step less its optimizer, and the optimizer alone.
  const core::Trace old = testing::make_small_trace();
  const core::CostModel old_costs(old);
  EXPECT_EQ(old_costs.micro_batch_ns(2), 15000 - 500);
  EXPECT_EQ(old_costs.optimizer_ns(), 500);
}

}  // namespace
}  // namespace headroom
