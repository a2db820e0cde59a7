#include <gtest/gtest.h>

#include "core/host_memory.h"
#include "core/units.h"
#include "report/execution_report.h"
#include "report/text_table.h"
#include "report/trace_report.h"
#include "support/trace_fixture.h"

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

TEST(ExecutionReport, HostMemoryIsShownNextToThePeak) {
  core::Report r;
  r.model = "gpt";
  r.device = "cpu";
  r.device_name = "test cpu";
  r.status = "ok";
  r.global_batch = 32;
  r.micro_batches = {16, 16};
  r.measured = {.peak_bytes = 98 << 20, .step_seconds = 0.5, .samples_per_second = 64};
  r.host_memory_regime = "glibc 2.36 malloc, mmap_threshold=1073741824, trim_threshold=1073741824";
  r.host_memory = core::HostMemoryReport{.resident_start_bytes = 180 << 20, .resident_peak_bytes = 390 << 20,
                                         .heap_start_bytes = 43 << 20, .heap_peak_bytes = 226 << 20,
                                         .heap_free_bytes = 144 << 20, .trims = 0};
  const std::string text = report::render_report(r);
  EXPECT_NE(text.find("host memory: malloc's heap 226 MiB resident at most (43.0 MiB before the model), 144 MiB of it free; "
                      "process 390 MiB (180 MiB before)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("handed back"), std::string::npos) << text;
  EXPECT_NE(text.find("host-memory regime: " + r.host_memory_regime), std::string::npos) << text;
  r.host_memory->trims = 3;
  EXPECT_NE(report::render_report(r).find("free heap handed back 3 time(s)"), std::string::npos);
}

TEST(TraceReport, StepTableShowsOverhead) {
  const std::string table = report::render_step_table(testing::make_small_trace());
  EXPECT_NE(table.find("1.12x"), std::string::npos) << table;  // 9000 / 8000 ns
}

}  // namespace
}  // namespace headroom
