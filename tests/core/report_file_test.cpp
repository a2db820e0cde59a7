#include <gtest/gtest.h>

#include "core/errors.h"
#include "core/report.h"

namespace headroom {
namespace {

TEST(ReportFile, RoundTripsAndNamesTheFirstProblem) {
  core::Report r;
  r.plan_path = "plan.json";
  r.model = "mlp";
  r.device = "cpu";
  r.device_name = "test cpu";
  r.budget_bytes = 20 << 20;
  r.global_batch = 64;
  r.micro_batches = {32, 32};
  r.checkpointed_blocks = {1};
  r.steps = 2;
  r.status = "out_of_memory";
  r.predicted = {.peak_bytes = 1000, .step_seconds = 0.5, .samples_per_second = 128};
  r.measured = {.peak_bytes = 1100, .step_seconds = 0.25, .samples_per_second = 256};
  r.peak_rel_error = 0.1;
  r.throughput_rel_error = 0.5;
  r.gradient_check = {true, 1e-7, "note"};
  r.out_of_memory = core::OutOfMemory{"fc1", "forward", 1, 4096, 1000, 20 << 20};
  r.warnings = {"w"};
  r.step_seconds = {0.25, 0.26};
  r.test_accuracy = 0.5;
  const core::Report back = core::report_from_json(core::to_json(r));
  EXPECT_EQ(core::to_json(back), core::to_json(r));

  auto broken = core::to_json(r);
  broken["measured"]["peak_bytes"] = "many";
  try {
    core::report_from_json(broken, "r.json");
    FAIL();
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("r.json: $.measured.peak_bytes"), std::string::npos) << e.what();
  }
}

// The host-memory regime and what the host held read back; reports from before have neither.
TEST(ReportFile, HostMemoryRoundTripsAndOldReportsReadWithout) {
  core::Report r;
  r.plan_path = "plan.json";
  r.model = "gpt";
  r.device = "cpu";
  r.device_name = "test cpu";
  r.status = "ok";
  r.host_memory_regime = "glibc 2.36 malloc, mmap_threshold=1073741824, trim_threshold=1073741824";
  r.host_memory = core::HostMemoryReport{.resident_start_bytes = 180 << 20, .resident_peak_bytes = 390 << 20,
                                         .heap_start_bytes = 43 << 20, .heap_peak_bytes = 226 << 20,
                                         .heap_free_bytes = 144 << 20, .trims = 2};
  const auto document = core::to_json(r);
  EXPECT_EQ(document["host_memory"]["heap_peak_bytes"], 226 << 20);
  const core::Report back = core::report_from_json(document);
  EXPECT_EQ(back.host_memory_regime, r.host_memory_regime);
  EXPECT_EQ(back.host_memory, r.host_memory);

  auto old = document;
  old.erase("host_memory");
  const core::Report old_back = core::report_from_json(old);
  EXPECT_EQ(old_back.host_memory_regime, "");
  EXPECT_FALSE(old_back.host_memory.has_value());

  auto broken = document;
  broken["host_memory"]["trims"] = -1;
  EXPECT_THROW(core::report_from_json(broken), core::InputError);
}

TEST(ReportFile, CountsPastIntAreRejected) {
  core::Report r;
  r.status = "ok";
  for (const auto& [path, value] : std::vector<std::pair<std::string, std::int64_t>>{
           {"/steps", std::int64_t{1} << 32}, {"/checkpointed_blocks/0", std::int64_t{1} << 31}}) {
    auto document = core::to_json(r);
    document["checkpointed_blocks"] = nlohmann::json::array({0});
    document[nlohmann::json::json_pointer(path)] = value;
    EXPECT_THROW(core::report_from_json(document), core::InputError) << path;
  }
}

}  // namespace
}  // namespace headroom
