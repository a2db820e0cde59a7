#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "core/atomic_file.h"
#include "core/collective.h"
#include "core/errors.h"
#include "core/plan.h"
#include "core/report.h"
#include "core/sha256.h"

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

TEST(AtomicFile, OutputsOfOneRunLandTogetherOrNotAtAll) {
  const fs::path dir = fresh_directory("headroom_atomic_together");
  core::write_file_atomically(dir / "s.json", "old");
  // The second name is valid to check but too long for its temporary (name + 12 characters > 255):
  // writing fails after the first file was staged, and neither may land.
  const fs::path long_name = dir / (std::string(250, 'c') + ".json");
  EXPECT_THROW(core::write_files_together({{dir / "s.json", "new"}, {long_name, "chrome"}}), std::runtime_error);
  EXPECT_EQ(core::read_file(dir / "s.json"), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);  // no temporaries
  // A path refused up front: nothing is written at all.
  EXPECT_THROW(core::write_files_together({{dir / "s.json", "new"}, {dir / "nodir" / "c.json", "x"}}), core::InputError);
  EXPECT_EQ(core::read_file(dir / "s.json"), "old");
  core::write_files_together({{dir / "s.json", "new"}, {dir / "c.json", "chrome"}});
  EXPECT_EQ(core::read_file(dir / "s.json"), "new");
  EXPECT_EQ(core::read_file(dir / "c.json"), "chrome");
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

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(core::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(core::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(core::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(core::sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Plans and reports whose numbers wrapped or overflowed: a micro-batch sum past int64 (UB), ids and
// block indexes past int's range that narrowed to accepted ones.
TEST(PlanFile, NumbersPastTheirRangeAreRejected) {
  core::Plan plan;
  plan.trace_path = "t.json";
  plan.trace_sha256 = std::string(64, '0');
  plan.budget_bytes = 1 << 30;
  plan.global_batch = 8;
  plan.choice.micro_batches = {4, 4};
  plan.choice.checkpointed_blocks = {1};
  plan.choice.layers = {{0, "fc", false, core::LayerVariant::Standard}};
  plan.runner_ups = {{4, 1, {}, "slower"}};
  // A technique's predicted parts (none here) are written only where the step has them.
  EXPECT_FALSE(core::to_json(plan).contains("predicted_parts"));
  plan.predicted_parts = {{"allreduce_seconds", 0.25}, {"l2l_host_bytes", 3e9}};
  const nlohmann::json good = core::to_json(plan);
  ASSERT_EQ(core::plan_from_json(good), plan);
  EXPECT_EQ(plan.predicted_part("allreduce_seconds"), 0.25);
  EXPECT_FALSE(plan.predicted_part("l2l_copy_seconds"));
  const std::int64_t huge = std::int64_t{1} << 62;
  struct Case {
    std::function<void(nlohmann::json&)> spoil;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[&](nlohmann::json& d) { d["micro_batches"] = {huge, huge, huge, huge}; }, "$.micro_batches[0]: micro-batch of 4611686018427387904 is larger"},
      {[&](nlohmann::json& d) { d["global_batch"] = huge; }, "$.global_batch: expected at most 1048576"},
      {[&](nlohmann::json& d) { d["micro_batches"] = {4, 4, 1}; }, "$.micro_batches: sizes sum to 9 or more, not the global batch 8"},
      {[&](nlohmann::json& d) { d["layers"][0]["id"] = std::int64_t{1} << 32; }, "$.layers[0].id: expected 0"},
      {[&](nlohmann::json& d) { d["checkpointed_blocks"] = {(std::int64_t{1} << 32) + 1}; },
       "$.checkpointed_blocks[0]: expected an integer from 0 to 16383, got 4294967297"},
      {[&](nlohmann::json& d) { d["explanation"]["runner_ups"][0]["checkpointed_blocks"] = std::int64_t{1} << 32; },
       "$.explanation.runner_ups[0].checkpointed_blocks: expected an integer from 0"},
      {[&](nlohmann::json& d) { d["layers"][0]["variant"] = "fp8"; },
       "$.layers[0].variant: unknown layer variant 'fp8' (expected standard or tempo)"},
      {[&](nlohmann::json& d) { d["layers"][0]["tempo"] = true; },
       "$.layers[0].tempo: give either variant or the older tempo flag, not both"},
      {[&](nlohmann::json& d) { d["world_size"] = 0; }, "$.world_size: expected an integer from 1 to 4096, got 0"},
      // A technique no step runs, or an optimizer nothing builds: refused with the names known.
      {[&](nlohmann::json& d) { d["strategies"] = {"mbp", "offload"}; },
       "$.strategies[1]: unknown strategy 'offload' (known: mbp, checkpoint, tempo, infcl, l2l)"},
      {[&](nlohmann::json& d) { d["optimizer"] = "rmsprop"; }, "$.optimizer: unknown optimizer 'rmsprop' (known: sgd, adam)"},
      {[&](nlohmann::json& d) { d["predicted_parts"]["allreduce_seconds"] = -1; },
       "$.predicted_parts.allreduce_seconds: expected a figure from 0 to 1e18"},
      {[&](nlohmann::json& d) { d["predicted_parts"]["l2l_host_bytes"] = "3 GB"; }, "$.predicted_parts.l2l_host_bytes: expected"},
      {[&](nlohmann::json& d) { d["predicted_parts"] = {1, 2}; }, "$.predicted_parts: expected"},
      {[&](nlohmann::json& d) { d["predicted_parts"]["matmul_bound_seconds"] = -0.5; },
       "$.predicted_parts.matmul_bound_seconds: expected a figure from 0 to 1e18"},
      // A class of work twice as slow cannot lengthen the step by more than the step.
      {[&](nlohmann::json& d) { d["predicted_parts"]["memory_bound_seconds"] = 1e6; },
       "$.predicted_parts.memory_bound_seconds: expected at most the predicted step"},
      {[&](nlohmann::json& d) { d["predicted_parts"]["allreduce_second"] = 1; },
       "$.predicted_parts.allreduce_second: unknown part (known: l2l_compute_seconds"},
  };
  for (const auto& c : cases) {
    nlohmann::json document = good;
    c.spoil(document);
    try {
      core::plan_from_json(document, "p.json");
      ADD_FAILURE() << "accepted; wanted: " << c.expected;
    } catch (const core::InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("p.json: " + c.expected, 0), 0u) << "got: " << e.what() << "\nwanted: " << c.expected;
    }
  }
}

// The step choice: variants by name, micro-batches swapped without touching the rest, and a world
// size that the plan file keeps (written only when it is not 1, so plans of one replica read as before).
TEST(StepChoice, VariantsMicroBatchesAndWorldSize) {
  for (const auto v : {core::LayerVariant::Standard, core::LayerVariant::Tempo}) {
    EXPECT_EQ(core::variant_named(core::variant_name(v)), v);
  }
  EXPECT_FALSE(core::variant_named("lean"));
  EXPECT_EQ(core::variant_names(), "standard or tempo");

  core::StepChoice choice;
  choice.set_variant(2, core::LayerVariant::Tempo);
  ASSERT_EQ(choice.layers.size(), 3u);
  EXPECT_EQ(choice.layers[1].id, 1);
  EXPECT_TRUE(choice.lean(2));
  EXPECT_FALSE(choice.lean(0));
  EXPECT_FALSE(choice.lean(7));  // past the entries: standard
  EXPECT_EQ(choice.lean_count(), 1);
  const auto other = choice.with_micro_batches({3, 2});
  EXPECT_EQ(other.samples(), 5);
  EXPECT_EQ(other.layers, choice.layers);

  core::Plan plan;
  plan.trace_path = "t.json";
  plan.trace_sha256 = std::string(64, '0');
  plan.budget_bytes = 1 << 30;
  plan.global_batch = 4;
  plan.choice.micro_batches = {4};
  EXPECT_FALSE(core::to_json(plan).contains("world_size"));
  // Data parallel: every worker's micro-batches, and how many are whose.
  plan.global_batch = 9;
  plan.choice.micro_batches = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  plan.choice.data_parallel = core::DataParallelChoice{8, {2, 1, 1, 1, 1, 1, 1, 1}, core::parse_link("25GB/s,5us"), 1 << 20};
  const auto document = core::to_json(plan);
  EXPECT_EQ(document.at("world_size"), 8);
  EXPECT_EQ(document.at("data_parallel").at("micro_batches_per_worker").size(), 8u);
  EXPECT_EQ(core::plan_from_json(document), plan);
  EXPECT_EQ(plan.choice.worker_micro_batches(0), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(plan.choice.first_micro_batch(3), 4u);
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
