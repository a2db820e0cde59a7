#include <gtest/gtest.h>

#include "core/errors.h"
#include "core/trace.h"
#include "core/trace_merge.h"
#include "support/trace_fixture.h"

namespace headroom {
namespace {

// Only the sizes of `keep` (indices into batch_sizes), every per-size field with them.
core::Trace with_sizes(core::Trace t, const std::vector<std::size_t>& keep) {
  const auto pick = [&](auto& v) {
    std::remove_reference_t<decltype(v)> out;
    for (const auto k : keep) out.push_back(v[k]);
    v = std::move(out);
  };
  pick(t.batch_sizes);
  for (auto& layer : t.layers) {
    pick(layer.samples);
    if (layer.tempo) pick(layer.tempo->samples);
  }
  pick(t.steps);
  if (!t.tempo_steps.empty()) pick(t.tempo_steps);
  return t;
}

// Sizes profiled apart and added together give the trace profiled at all of them; what would mix
// two models, machines or option sets is refused by name, and so is a size measured twice.
TEST(TraceMerge, AddedSizesFallIntoPlaceAndMismatchesAreRefused) {
  const core::Trace whole = testing::make_small_tempo_trace();
  const core::Trace first = with_sizes(whole, {0});
  const core::Trace second = with_sizes(whole, {1});
  EXPECT_EQ(core::with_batch_sizes_added(first, second), whole);
  EXPECT_EQ(core::with_batch_sizes_added(second, first), whole);

  const auto error = [](const core::Trace& a, const core::Trace& b) {
    try {
      core::with_batch_sizes_added(a, b);
    } catch (const core::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(whole, second).find("batch size 2 is in the trace already"), std::string::npos);
  core::Trace other = second;
  other.model.config["hidden"] = "16";
  EXPECT_NE(error(first, other).find("--add-to: the traces differ in their model"), std::string::npos);
  other = second;
  other.optimizer.name = "sgd";
  EXPECT_NE(error(first, other).find("their optimizer (adam against sgd)"), std::string::npos);
  other = second;
  other.profile.threads = 1;
  EXPECT_NE(error(first, other).find("their threads (2 against 1; give --threads 2)"), std::string::npos);
  other = second;
  other.precision = core::Precision::Bf16;
  EXPECT_NE(error(first, other).find("their precisions (fp32 against bf16)"), std::string::npos);
  other = second;
  other.layers[1].kind = "relu";
  EXPECT_NE(error(first, other).find("layer 1 (gelu)"), std::string::npos);
  other = with_sizes(testing::make_small_trace(), {1});
  EXPECT_NE(error(first, other).find("the Tempo pass"), std::string::npos);
}

// Sizes added from a trace that read another library workspace (or none: one from before it was
// recorded): the merged trace keeps the smaller, and every step's peak, Tempo's too, carries that one.
TEST(TraceMerge, StepsCarryTheMergedTracesWorkspace) {
  core::Trace whole = testing::make_small_tempo_trace();
  constexpr std::int64_t kWorkspace = std::int64_t{64} << 20;
  core::Trace first = with_sizes(whole, {0});
  core::Trace second = with_sizes(whole, {1});
  second.workspace_bytes = kWorkspace;
  second.optimizer.host_ns_per_param = 2.5;
  for (auto* steps : {&second.steps, &second.tempo_steps}) {
    for (auto& step : *steps) step.peak_bytes += kWorkspace;
  }
  whole.optimizer.host_ns_per_param = 2.5;
  EXPECT_EQ(core::with_batch_sizes_added(first, second), whole);
  EXPECT_EQ(core::with_batch_sizes_added(second, first).steps, whole.steps);
  EXPECT_EQ(core::with_batch_sizes_added(second, first).tempo_steps, whole.tempo_steps);
  EXPECT_EQ(core::with_batch_sizes_added(second, first).workspace_bytes, 0);
}

}  // namespace
}  // namespace headroom
