#include <gtest/gtest.h>

#include "core/report.h"
#include "report/execution_report.h"

namespace headroom {
namespace {

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

}  // namespace
}  // namespace headroom
