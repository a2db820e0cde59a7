#include <gtest/gtest.h>

#include "core/host_memory.h"
#include "core/units.h"
#include "report/trace_report.h"
#include "support/trace_fixture.h"

namespace headroom {
namespace {

TEST(TraceReport, LayerTableShowsPerSampleKeptBytesFromTheFit) {
  const std::string table = report::render_layer_table(testing::make_small_trace());
  // fc keeps 32 bytes per sample (32 at batch 1, 64 at batch 2); totals: 68 per sample, 136 at batch 2.
  EXPECT_NE(table.find("0  fc     linear   400 B         32 B    64 B     0.002     0.004\n"), std::string::npos)
      << table;
  EXPECT_NE(table.find("   total           400 B         68 B   136 B     0.006     0.012\n"), std::string::npos)
      << table;
}

TEST(TraceReport, GpuTableShowsKernelTimeAgainstWallTime) {
  EXPECT_EQ(report::render_gpu_table(testing::make_small_trace()), "");
  const std::string table = report::render_gpu_table(testing::make_small_cuda_trace());
  EXPECT_NE(table.find("NVIDIA H100 80GB HBM3: 79.2 GiB, 132 SMs, pinned copies host->device 24.00 GB/s, device->host 25.00 GB/s\n"),
            std::string::npos)
      << table;
  auto timed = testing::make_small_cuda_trace();
  timed.device.host_to_device_latency_ns = 8'000;
  timed.device.device_to_host_latency_ns = 9'500;
  EXPECT_EQ(report::describe_copy_link(timed.device),
            "pinned copies host->device 24.00 GB/s + " + core::format_duration_ns(8'000) + " each, device->host 25.00 GB/s + " +
                core::format_duration_ns(9'500) + " each");
  EXPECT_EQ(report::describe_copy_link(testing::make_small_trace().device), "");
  // gelu at batch 2: forward wall 2000 ns, kernels 1000 ns (50% busy), 2 kernels; backward 4000 ns, 2000 ns.
  EXPECT_NE(table.find("1  gelu         0.002          0.001   50%        2        0.004          0.002   50%        3"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("    2      0.007            0.001        5.86 KiB       8.00 MiB    2.00 MiB"), std::string::npos) << table;
}

TEST(TraceReport, StepTableNamesTheRegimeAndHowASequenceSpendsItsTime) {
  core::Trace trace = testing::make_small_trace();
  EXPECT_NE(report::render_step_table(trace).find(std::string("host-memory regime: ") + core::kUnrecordedRegime),
            std::string::npos);
  EXPECT_EQ(report::render_step_table(trace).find("first ms"), std::string::npos);
  trace.host_memory_regime = "glibc 2.36 malloc, mmap_threshold=1073741824, trim_threshold=1073741824";
  trace.steps[0].sequence = core::StepSequence{.micro_batch_ns = 7000, .first_micro_batch_ns = 7400, .zero_grad_ns = 30};
  trace.steps[1].sequence = core::StepSequence{.micro_batch_ns = 12000, .first_micro_batch_ns = 17000, .zero_grad_ns = 31};
  const std::string table = report::render_step_table(trace);
  EXPECT_NE(table.find("host-memory regime: " + trace.host_memory_regime), std::string::npos) << table;
  EXPECT_NE(table.find("micro-batch ms"), std::string::npos) << table;
  EXPECT_NE(table.find("0.017"), std::string::npos) << table;  // batch 2's first micro-batch, in ms
}

TEST(TraceReport, StepTableShowsOverhead) {
  const std::string table = report::render_step_table(testing::make_small_trace());
  EXPECT_NE(table.find("1.12x"), std::string::npos) << table;  // 9000 / 8000 ns
}

}  // namespace
}  // namespace headroom
