// The reference traces in traces/ are inputs to later regression tests; they must stay readable
// under the current schema and hold what the profiler promises.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/affine_fit.h"
#include "core/trace.h"
#include "support/build_paths.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> committed_traces() {
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(HEADROOM_TRACES_DIR)) {
    if (entry.path().extension() == ".json") paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

TEST(CommittedTraces, EveryZooModelHasACpuTrace) {
  std::set<std::string> models;
  for (const auto& path : committed_traces()) {
    const core::Trace trace = core::read_trace_file(path);
    if (trace.device.kind == "cpu") models.insert(trace.model.name);
  }
  EXPECT_EQ(models, (std::set<std::string>{"mlp", "cnn", "bert", "gpt", "clip"}));
}

TEST(CommittedTraces, AreValidAndConsistent) {
  for (const auto& path : committed_traces()) {
    SCOPED_TRACE(path.filename().string());
    const core::Trace trace = core::read_trace_file(path);
    // A contrastive loss (clip) keeps the B x B logits: its memory is quadratic in the batch and
    // planned from its own profile, which it must have.
    const bool contrastive = trace.layers.back().kind == "contrastive_loss";
    EXPECT_EQ(trace.layers.back().kind, contrastive ? "contrastive_loss" : "loss");
    EXPECT_EQ(trace.contrastive_loss.has_value(), contrastive);
    for (const auto& layer : trace.layers) {
      if (layer.kind == "contrastive_loss") continue;
      std::vector<std::int64_t> kept;
      for (const auto& s : layer.samples) {
        kept.push_back(s.kept_bytes);
        EXPECT_GT(s.fwd_ns, 0) << layer.name;
        EXPECT_GT(s.bwd_ns, 0) << layer.name;
      }
      // On the CPU every byte a layer keeps is a tensor of its own: affine in the batch, exactly. On
      // CUDA they are the caching allocator's rounded blocks, and cuDNN and cuBLAS pick kernels (and
      // what those save) by size: within 2 MiB (the H200 traces: 1.7 MiB at most, gpt small's
      // attention). The planner interpolates between the sampled sizes either way.
      const double slack = trace.device.is_cuda() ? 2.0 * (1 << 20) : 0.5;
      EXPECT_LT(core::fit_affine(trace.batch_sizes, kept).max_abs_residual, slack) << layer.name;
    }
    for (const auto& step : trace.steps) {
      EXPECT_GT(step.peak_bytes, step.static_bytes + step.input_bytes);
      EXPECT_GE(step.static_bytes, 2 * trace.param_bytes());  // parameters and their gradients at least
    }
  }
}

}  // namespace
}  // namespace headroom
