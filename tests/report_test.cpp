#include <gtest/gtest.h>

#include "report/text_table.h"
#include "report/trace_report.h"
#include "trace_fixture.h"

namespace headroom {
namespace {

TEST(TextTable, AlignsColumns) {
  report::TextTable table({{"name", report::TextTable::Align::Left}, {"bytes"}});
  table.add_row({"fc", "1.00 KiB"});
  table.add_row({"attention", "12 B"});
  table.add_rule();
  table.add_row({"total", "1.01 KiB"});
  EXPECT_EQ(table.render(),
            "name          bytes\n"
            "-------------------\n"
            "fc         1.00 KiB\n"
            "attention      12 B\n"
            "-------------------\n"
            "total      1.01 KiB\n");
}

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
  EXPECT_NE(table.find("NVIDIA H100 80GB HBM3: 79.2 GiB, 132 SMs, pinned copies 24.0 GB/s host->device, 25.0 GB/s device->host"),
            std::string::npos)
      << table;
  // gelu at batch 2: forward wall 2000 ns, kernels 1000 ns (50% busy), 2 kernels; backward 4000 ns, 2000 ns.
  EXPECT_NE(table.find("1  gelu         0.002          0.001   50%        2        0.004          0.002   50%        3"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("    2      0.007            0.001        5.86 KiB       8.00 MiB    2.00 MiB"), std::string::npos) << table;
}

TEST(TraceReport, StepTableShowsOverhead) {
  const std::string table = report::render_step_table(testing::make_small_trace());
  EXPECT_NE(table.find("1.12x"), std::string::npos) << table;  // 9000 / 8000 ns
}

}  // namespace
}  // namespace headroom
