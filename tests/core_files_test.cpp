#include <gtest/gtest.h>

#include <filesystem>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/report.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

fs::path fresh_directory(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(AtomicFile, WritesAndReplacesWithoutLeavingTemporaries) {
  const fs::path dir = fresh_directory("headroom_atomic_ok");
  core::write_file_atomically(dir / "out.json", "first");
  core::write_file_atomically(dir / "out.json", "second");
  EXPECT_EQ(core::read_file(dir / "out.json"), "second");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
  fs::remove_all(dir);
}

TEST(AtomicFile, FailureLeavesNothingBehind) {
  const fs::path dir = fresh_directory("headroom_atomic_fail");
  // Renaming onto a directory fails after the temporary was written: it must be cleaned up.
  fs::create_directories(dir / "taken");
  fs::create_directories(dir / "taken" / "child");
  EXPECT_THROW(core::write_file_atomically(dir / "taken", "x"), std::runtime_error);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
  EXPECT_THROW(core::write_file_atomically(dir / "missing" / "out.json", "x"), std::runtime_error);
  fs::remove_all(dir);
}

TEST(AtomicFile, ReadingAMissingFileNamesIt) {
  try {
    core::read_file("/nonexistent/headroom.json");
    FAIL();
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/headroom.json"), std::string::npos);
  }
}

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
  r.predicted = {1000, 0.5, 128};
  r.measured = {1100, 0.25, 256};
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

}  // namespace
}  // namespace headroom
