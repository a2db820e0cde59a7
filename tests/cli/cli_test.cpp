// Runs the `headroom` binary as a user would and checks exit codes, error lines and outputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/atomic_file.h"
#include "core/json_reader.h"
#include "core/plan.h"
#include "core/report.h"
#include "core/trace.h"
#include "runtime/host_info.h"
#include "support/build_paths.h"
#include "support/run_headroom.h"
#include "support/scoped_env.h"
#include "support/spinning_child.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

using testing::CommandResult;

CommandResult run(const std::string& args) { return testing::run_headroom(args, "headroom_cli_test.stderr"); }

// One line naming the problem.
void expect_one_line_error(const CommandResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

const std::string kSmallMlp = "--model mlp --set input=16 --set hidden=32 --set depth=2 --batch-sizes 1,2 --repeats 1";

TEST(Cli, UsageErrorsExitWithTwo) {
  expect_one_line_error(run(""), "A subcommand is required");
  expect_one_line_error(run("frobnicate"), "unknown command 'frobnicate'");
  expect_one_line_error(run("profile --model mlp"), "--output");
  expect_one_line_error(run("profile --model mlp --optimizer lamb -o x.json"), "lamb");
}

TEST(Cli, BadProfileInputsExitWithTwoAndWriteNothing) {
  const fs::path out = fs::temp_directory_path() / "headroom_cli_never.json";
  fs::remove(out);
  const std::string o = " -o " + out.string();
  expect_one_line_error(run("profile --model resnet" + o), "unknown model 'resnet'");
  expect_one_line_error(run("profile --model mlp --set depth=abc" + o), "key 'depth'");
  // The libraries name fields (setting, batch_sizes, warmup_steps, device); the command names its flags.
  expect_one_line_error(run("profile --model mlp --set depth" + o), "--set: expected key=value");
  expect_one_line_error(run("profile --model mlp --batch-sizes 4,2" + o), "--batch-sizes: batch sizes must be strictly ascending");
  expect_one_line_error(run("profile --model mlp --warmup 0" + o), "--warmup: at least one warm-up step");
  for (const std::string seconds : {"-1", "nan", "1e9"}) {
    expect_one_line_error(run("profile --model mlp --timing-seconds " + seconds + o),
                          "--timing-seconds: expected 0 (no timing rounds) to 3600 seconds");
  }
#ifndef HEADROOM_CUDA_BUILD
  expect_one_line_error(run("profile --model mlp --device cuda" + o), "--device cuda");
#endif
  // Beside a process that keeps a core busy (where profile says at how many threads it will run), a
  // bad input is still refused with its one line alone.
  testing::SpinningChild spinner(std::chrono::seconds(10));
  ASSERT_TRUE(spinner.started());
  expect_one_line_error(run("profile --model mlp --batch-sizes 4,2" + o), "--batch-sizes: batch sizes must be strictly ascending");
  spinner.stop();
  EXPECT_FALSE(fs::exists(out));
}

// Off a terminal (a log, the desktop app) a run's progress is a line per phase and per tenth of its
// steps, the last step always among them: not a line per step.
TEST(Cli, ExecuteProgressOffATerminalIsALinePerTenth) {
  const fs::path dir = fs::temp_directory_path() / "headroom_cli_progress";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string t = (dir / "t.json").string(), p = (dir / "p.json").string();
  ASSERT_EQ(run("profile " + kSmallMlp + " --threads 1 --timing-seconds 0 -o " + t).exit_code, 0);
  ASSERT_EQ(run("plan " + t + " --budget 1GiB --batch 2 --strategies none -o " + p).exit_code, 0);
  const CommandResult r = run("execute " + p + " --steps 40 --warmup 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> steps;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("executing: step ", 0) == 0) steps.push_back(line.substr(16));
  }
  EXPECT_EQ(steps, (std::vector<std::string>{"1/40", "4/40", "8/40", "12/40", "16/40", "20/40", "24/40", "28/40", "32/40",
                                             "36/40", "40/40"}))
      << r.err;
  EXPECT_NE(r.err.find("executing: warm-up 1/1\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("executing: calibration after\n"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(Cli, ProfileWritesAValidTraceAndChromeTimeline) {
  const fs::path dir = fs::temp_directory_path() / "headroom_cli_profile";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const CommandResult r = run("profile " + kSmallMlp + " -o " + (dir / "t.json").string() + " --chrome " +
                    (dir / "c.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const core::Trace trace = core::read_trace_file(dir / "t.json");
  EXPECT_EQ(trace.model.name, "mlp");
  EXPECT_EQ(trace.batch_sizes, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(trace.model.config.at("depth"), "2");
  const auto chrome = core::parse_json(core::read_file(dir / "c.json"), "c.json");
  EXPECT_GT(chrome["traceEvents"].size(), 2 * trace.layers.size());
  // The table a person reads: every layer by name, and the step summary.
  for (const auto& layer : trace.layers) EXPECT_NE(r.out.find(layer.name), std::string::npos) << layer.name;
  EXPECT_NE(r.out.find("overhead"), std::string::npos);
  // Progress went to stderr.
  EXPECT_NE(r.err.find("profiling mlp"), std::string::npos);
  fs::remove_all(dir);
}

// Sizes a plan chose between the profiled ones are profiled into the trace: the same trace with
// them in place, its other sizes' samples as they were; a trace of other options is refused before
// anything is measured, and the file is left as it was.
TEST(Cli, ProfileAddsBatchSizesToATrace) {
  const fs::path dir = fs::temp_directory_path() / "headroom_cli_add_to";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string mlp = "--model mlp --set input=16 --set hidden=32 --set depth=2 --repeats 1 --threads 1";
  const std::string t = (dir / "t.json").string();
  ASSERT_EQ(run("profile " + mlp + " --batch-sizes 1,4 -o " + t).exit_code, 0);
  const core::Trace before = core::read_trace_file(t);
  const CommandResult r = run("profile " + mlp + " --batch-sizes 2,3 --add-to " + t + " -o " + t);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const core::Trace after = core::read_trace_file(t);
  EXPECT_EQ(after.batch_sizes, (std::vector<std::int64_t>{1, 2, 3, 4}));
  for (std::size_t i = 0; i < after.layers.size(); ++i) {
    // Memory is as measured at every size; the sizes there before keep their samples.
    EXPECT_EQ(after.layers[i].samples[0].kept_bytes, before.layers[i].samples[0].kept_bytes);
    EXPECT_EQ(after.layers[i].samples[3].kept_bytes, before.layers[i].samples[1].kept_bytes);
    EXPECT_EQ(after.layers[i].samples[1].batch, 2);
  }
  EXPECT_EQ(after.steps[2].batch, 3);
  EXPECT_EQ(after.calibration, before.calibration);
  // Timed as the trace's own sizes were, unless told otherwise.
  EXPECT_EQ(after.profile.timing_seconds, 2.0);

  const std::string kept = core::read_file(t);
  expect_one_line_error(run("profile " + mlp + " --batch-sizes 2 --add-to " + t + " -o " + t),
                        "--add-to: batch size 2 is in the trace already");
  expect_one_line_error(run("profile " + mlp + " --optimizer sgd --batch-sizes 5 --add-to " + t + " -o " + t),
                        "--add-to: " + t + " was profiled with --optimizer adam");
  expect_one_line_error(run("profile " + mlp + " --precision bf16 --batch-sizes 5 --add-to " + t + " -o " + t),
                        "--add-to: " + t + " measured fp32; give --precision fp32 as it was profiled");
  expect_one_line_error(run("profile --model mlp --set hidden=64 --repeats 1 --threads 1 --batch-sizes 5 --add-to " + t +
                            " -o " + t),
                        "--add-to: the traces differ in their model");
  expect_one_line_error(run("profile " + mlp + " --batch-sizes 5 --add-to " + (dir / "none.json").string() + " -o " + t),
                        "none.json");
  expect_one_line_error(run("profile --model mlp --set input=16 --set hidden=32 --set depth=2 --repeats 1 --threads 2 "
                            "--batch-sizes 5 --add-to " + t + " -o " + t),
                        "--add-to: " + t + " was profiled at 1 thread; leave --threads out or give 1");
  expect_one_line_error(run("profile " + mlp + " --timing-seconds 0.5 --batch-sizes 5 --add-to " + t + " -o " + t),
                        "--add-to: " + t + " was timed with --timing-seconds 2; leave --timing-seconds out or give 2");
  expect_one_line_error(run("profile " + mlp + " --batch-sizes 5 --add-to " + t + " -o " + t + " --chrome " +
                            (dir / "c.json").string()),
                        "--chrome: draws a trace's largest batch size");
  EXPECT_EQ(core::read_file(t), kept);
  fs::remove_all(dir);
}

// A peak well under its prediction at micro-batches between the profiled sizes is said, with the
// command that measures them. Here the bound is made loose by hand: the first layer's backward
// transient at the larger profiled size raised by 8 MB, so a micro-batch of 3 between 1 and 4 is
// predicted about 5.3 MB high.
TEST(Cli, ExecuteNamesTheUnprofiledSizesBehindALoosePeak) {
  const fs::path dir = fs::temp_directory_path() / "headroom_cli_unprofiled";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string t = (dir / "t.json").string(), p = (dir / "p.json").string();
  ASSERT_EQ(run("profile --model mlp --set input=16 --set hidden=32 --set depth=2 --repeats 1 --threads 1 "
                "--batch-sizes 1,4 -o " + t).exit_code, 0);
  auto document = core::parse_json(core::read_file(t), t);
  auto& transient = document["layers"][0]["samples"][1]["bwd_transient_bytes"];
  transient = transient.get<std::int64_t>() + 8'000'000;
  core::write_file_atomically(t, document.dump());
  ASSERT_EQ(run("plan " + t + " --budget 1GiB --batch 3 --strategies none -o " + p).exit_code, 0);
  const CommandResult r = run("execute " + p + " --steps 1 --warmup 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("over the measured peak: micro-batches of 3 were not profiled"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--batch-sizes 3 --add-to " + t + " -o " + t), std::string::npos) << r.out;
  // At a profiled size the prediction is a measurement: nothing to say.
  ASSERT_EQ(run("plan " + t + " --budget 1GiB --batch 1 --strategies none -o " + p).exit_code, 0);
  EXPECT_EQ(run("execute " + p + " --steps 1 --warmup 1").out.find("were not profiled"), std::string::npos);
  fs::remove_all(dir);
}

const std::string kTrace = std::string(HEADROOM_TRACES_DIR) + "/cpu-bert.json";

TEST(Cli, PlanAndSimulateAgree) {
  const fs::path dir = fs::temp_directory_path() / "headroom_cli_plan";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto plan = run("plan " + kTrace + " --budget 300MiB --batch 32 -o " + (dir / "p.json").string());
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("micro-batches"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("predicted peak"), std::string::npos);
  const auto sim = run("simulate " + (dir / "p.json").string() + " -o " + (dir / "s.json").string() + " --chrome " +
                       (dir / "c.json").string());
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const auto result = core::parse_json(core::read_file(dir / "s.json"), "s.json");
  EXPECT_EQ(result["schema"], "headroom.simulation/2");
  EXPECT_EQ(result["simulated"]["peak_bytes"], result["planned"]["peak_bytes"]);
  EXPECT_GT(result["memory_timeline"].size(), 10u);
  EXPECT_TRUE(result["repeats"].is_array());
  EXPECT_TRUE(fs::exists(dir / "c.json"));
  fs::remove_all(dir);
}

// `plan` times this machine in a `headroom calibrate` child (run in the thread-pool regime profile
// and execute run in) and keeps the answer: a second plan reads it instead of timing again, and a
// cache that cannot be written costs nothing but the time.
TEST(Cli, PlanTimesThisMachineOnceInAChildAndKeepsIt) {
  const fs::path dir = fs::temp_directory_path() / ("headroom_cli_calibration." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  testing::ScopedEnv cache_home("XDG_CACHE_HOME", (dir / "cache").string());
  // A quiet machine, whatever else runs beside the test (a busy one is the next test's subject).
  const testing::ScopedEnv quiet(runtime::kAssumedOthersVariable, "0");
  const auto first = run("plan " + kTrace + " --budget 300MiB --batch 32 -o " + (dir / "p.json").string());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out.find("could not be timed"), std::string::npos) << first.out;
  std::vector<fs::path> kept;
  for (const auto& entry : fs::directory_iterator(dir / "cache" / "headroom")) kept.push_back(entry.path());
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].filename().string().rfind("calibration-v2-cpu-", 0), 0u) << kept[0];
  const auto document = core::parse_json(core::read_file(kept[0]), kept[0].string());
  EXPECT_EQ(document["calibration"]["runs"].size(), 3u);
  const auto second = run("plan " + kTrace + " --budget 300MiB --batch 32 -o " + (dir / "p.json").string());
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(core::parse_json(core::read_file(kept[0]), kept[0].string())["saved_at_unix"], document["saved_at_unix"]);

  // A file where the cache's directory would be: measured, not kept, no warning.
  core::write_file_atomically(dir / "blocked", "not a directory\n");
  cache_home.set((dir / "blocked").string());
  const auto blocked = run("plan " + kTrace + " --budget 300MiB --batch 32 -o " + (dir / "p.json").string());
  EXPECT_EQ(blocked.exit_code, 0) << blocked.err;
  EXPECT_EQ(blocked.out.find("could not be timed"), std::string::npos) << blocked.out;
  fs::remove_all(dir);
}

// A timing of this machine taken while other processes kept its cores busy is not its speed: one
// taken beside another job read the matrix product at 63-87 GFLOP/s where the machine runs 180-200,
// was kept, and every plan for the next hour rescaled its trace to half its speed. `calibrate`
// prints it but keeps it for no later command; `plan` does not rescale by it, and says why.
TEST(Cli, ATimingTakenBesideOtherProcessesIsNeitherKeptNorUsed) {
  const fs::path dir = fs::temp_directory_path() / ("headroom_cli_shared_timing." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const testing::ScopedEnv cache_home("XDG_CACHE_HOME", (dir / "cache").string());
  {
    // Every core kept busy by other processes, as /proc/stat would say of a machine running
    // another job (runtime::cores_busy_with_others reads it; its own test, HostInfo.*, checks that).
    const testing::ScopedEnv busy(runtime::kAssumedOthersVariable, std::to_string(runtime::usable_cores()));
    const auto timed = run("calibrate -o " + (dir / "c.json").string());
    ASSERT_EQ(timed.exit_code, 0) << timed.err;
    EXPECT_TRUE(fs::exists(dir / "c.json"));  // asked for, so written
    EXPECT_NE(timed.err.find("warning: other processes kept"), std::string::npos) << timed.err;
    EXPECT_NE(timed.err.find("not kept as the machine's speed"), std::string::npos) << timed.err;
    EXPECT_FALSE(fs::exists(dir / "cache" / "headroom")) << timed.err;

    const auto planned = run("plan " + kTrace + " --budget 300MiB --batch 32 -o " + (dir / "p.json").string());
    ASSERT_EQ(planned.exit_code, 0) << planned.err;
    EXPECT_NE(planned.out.find("this machine could not be timed (other processes kept"), std::string::npos) << planned.out;
    EXPECT_EQ(planned.out.find("rescaled"), std::string::npos) << planned.out;
    EXPECT_FALSE(fs::exists(dir / "cache" / "headroom")) << planned.err;
  }
  // The trace's own times, as --no-rescale keeps them.
  const auto unrescaled = run("plan " + kTrace + " --budget 300MiB --batch 32 --no-rescale -o " + (dir / "kept.json").string());
  ASSERT_EQ(unrescaled.exit_code, 0) << unrescaled.err;
  EXPECT_EQ(core::read_plan_file(dir / "p.json").predicted, core::read_plan_file(dir / "kept.json").predicted);
  fs::remove_all(dir);
}

// A profile's calibrations are the newest timing of this machine: kept as its cached one, so the plan
// made next compares the trace with the machine as it just was, not as an older cache says it was
// (this machine's memory moves 20-40% within minutes). Not kept where other processes shared the
// machine while profiling.
TEST(Cli, ProfileKeepsItsCalibrationForThePlansThatFollow) {
  const fs::path dir = fs::temp_directory_path() / ("headroom_cli_profile_cache." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const testing::ScopedEnv cache_home("XDG_CACHE_HOME", (dir / "cache").string());
  std::optional<testing::ScopedEnv> others(std::in_place, runtime::kAssumedOthersVariable, "0");
  const auto profiled = run("profile " + kSmallMlp + " -o " + (dir / "t.json").string());
  ASSERT_EQ(profiled.exit_code, 0) << profiled.err;
  const core::Trace trace = core::read_trace_file(dir / "t.json");
  ASSERT_TRUE(trace.calibration.has_value());
  const fs::path kept = dir / "cache" / "headroom" / ("calibration-v2-cpu-" + std::to_string(trace.calibration->threads) + "t.json");
  ASSERT_TRUE(fs::exists(kept)) << profiled.err;
  const auto document = core::parse_json(core::read_file(kept), kept.string());
  EXPECT_EQ(core::read_calibration(core::JsonNode(document["calibration"], "$")), *trace.calibration);
  // The plan reads it: the trace's machine is the machine at hand, nothing to rescale.
  const auto plan = run("plan " + (dir / "t.json").string() + " --budget 1GiB --batch 2 -o " + (dir / "p.json").string());
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_EQ((plan.out + plan.err).find("as fast as"), std::string::npos) << plan.out << plan.err;

  // Profiled beside other processes that kept every core busy: its timing is not kept.
  fs::remove_all(dir / "cache");
  others.emplace(runtime::kAssumedOthersVariable, std::to_string(runtime::usable_cores()));
  const auto shared = run("profile " + kSmallMlp + " -o " + (dir / "t.json").string());
  ASSERT_EQ(shared.exit_code, 0) << shared.err;
  EXPECT_NE(shared.err.find("other processes kept"), std::string::npos) << shared.err;
  EXPECT_FALSE(fs::exists(kept)) << shared.err;
  fs::remove_all(dir);
}

// A plan whose times hold for a machine three times as fast as this one is rescaled to this one when
// it runs: execute times the machine before and after the run and predicts from the better of the
// two, saying so beside the plan's own prediction.
TEST(Cli, ExecutePredictsForTheMachineItRunsOn) {
  const fs::path dir = fs::temp_directory_path() / ("headroom_cli_rescale." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ASSERT_EQ(run("profile " + kSmallMlp + " -o " + (dir / "t.json").string()).exit_code, 0);
  core::Trace trace = core::read_trace_file(dir / "t.json");
  ASSERT_TRUE(trace.calibration.has_value());
  for (auto& r : trace.calibration->runs) {
    r.matmul_flops_per_s *= 3;
    r.conv_flops_per_s *= 3;
    r.memory_bytes_per_s *= 3;
  }
  core::write_trace_file(dir / "fast.json", trace);
  // Kept as the trace's machine's (--no-rescale), so the run is what finds the difference.
  const auto planned = run("plan " + (dir / "fast.json").string() + " --budget 1GiB --batch 2 --no-rescale -o " + (dir / "p.json").string());
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const core::Plan plan = core::read_plan_file(dir / "p.json");
  const auto executed = run("execute " + (dir / "p.json").string() + " --steps 2 -o " + (dir / "r.json").string());
  ASSERT_EQ(executed.exit_code, 0) << executed.err;
  const core::Report report = core::read_report_file(dir / "r.json");
  ASSERT_TRUE(report.calibration_before && report.calibration_after && report.predicted_calibration);
  const std::string said = "the predicted times are rescaled to it";
  const auto line = std::find_if(report.warnings.begin(), report.warnings.end(),
                                 [&](const std::string& w) { return w.find(said) != std::string::npos; });
  ASSERT_NE(line, report.warnings.end()) << executed.out << executed.err;
  // Rescaled from the plan's step, slower by what the layers are made of (about 3x: this machine's
  // kernels are a third of the trace's, give or take its noise).
  const double factor = report.predicted.step_seconds / plan.predicted.step_seconds;
  EXPECT_GT(factor, 1.5) << *line;
  EXPECT_LT(factor, 4.5) << *line;
  // The machine the prediction now holds for is the better of the run's two timings, kernel by kernel.
  ASSERT_EQ(report.predicted_calibration->runs.size(), 1u);
  EXPECT_EQ(report.predicted_calibration->memory(), std::max(report.calibration_before->memory(), report.calibration_after->memory()));
  EXPECT_EQ(report.predicted_calibration->matmul(), std::max(report.calibration_before->matmul(), report.calibration_after->matmul()));

  // A plan without its time by class of work (an older headroom's) keeps its prediction, and says so.
  auto older = core::parse_json(core::read_file(dir / "p.json"), "p.json");
  ASSERT_TRUE(older["predicted_parts"].contains("compute_bound_seconds")) << older["predicted_parts"];
  older.erase("predicted_parts");
  core::write_file_atomically(dir / "older.json", older.dump(1));
  const auto kept = run("execute " + (dir / "older.json").string() + " --steps 1 -o " + (dir / "r2.json").string());
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  const core::Report unmoved = core::read_report_file(dir / "r2.json");
  EXPECT_EQ(unmoved.predicted.step_seconds, plan.predicted.step_seconds);
  EXPECT_NE(kept.out.find("does not split its time by class of work"), std::string::npos) << kept.out;
  fs::remove_all(dir);
}

// Tens of thousands of micro-batches simulate as one: the outputs list the first micro-batch of a run
// of identical ones and summarise the rest, so they stay small (the Chrome trace opens in Perfetto).
// A batch of 120,000 splits evenly at every micro-batch size the trace's times may make fastest
// (1 to 6, 8, 10, 12).
TEST(Cli, SimulateSummarisesIdenticalMicroBatches) {
  const fs::path dir = fs::temp_directory_path() / "headroom_cli_repeats";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The trace's own times on both sides: under ctest -j2 another test's timing of this machine can
  // land in the shared cache between the two commands, and simulate would rescale to it (3,566 s
  // simulated against 3,442 planned, once).
  const auto plan = run("plan " + kTrace + " --budget 241MiB --batch 120000 --no-rescale -o " + (dir / "p.json").string());
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const auto planned = core::parse_json(core::read_file(dir / "p.json"), "p.json");
  const std::int64_t n = static_cast<std::int64_t>(planned["micro_batches"].size());
  ASSERT_GE(n, 10'000);
  for (const auto& size : planned["micro_batches"]) ASSERT_EQ(size, planned["micro_batches"][0]);
  const auto sim = run("simulate " + (dir / "p.json").string() + " --no-rescale -o " + (dir / "s.json").string() +
                       " --chrome " + (dir / "c.json").string());
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_NE(sim.out.find(std::to_string(n) + " micro-batches"), std::string::npos) << sim.out;
  const auto result = core::parse_json(core::read_file(dir / "s.json"), "s.json");
  EXPECT_EQ(result["simulated"]["peak_bytes"], result["planned"]["peak_bytes"]);
  EXPECT_NEAR(result["simulated"]["step_seconds"].get<double>(), result["planned"]["step_seconds"].get<double>(), 1e-9);
  EXPECT_EQ(result["micro_batches"], n);
  ASSERT_EQ(result["repeats"].size(), 1u);
  const auto& repeat = result["repeats"][0];
  EXPECT_EQ(repeat["first_micro_batch"], 0);
  EXPECT_EQ(repeat["micro_batches"], n - 1);
  EXPECT_EQ(repeat["end_ns"].get<std::int64_t>(),
            repeat["start_ns"].get<std::int64_t>() + (n - 1) * repeat["repetition_ns"].get<std::int64_t>());
  // Every repetition's tasks counted, one repetition's simulated: the last micro-batch and the
  // optimizer step are tasks of their own.
  const std::int64_t each = repeat["tasks_each"];
  EXPECT_EQ(result["tasks"].get<std::int64_t>(), n * each + 1);
  EXPECT_EQ(result["simulated_tasks"].get<std::int64_t>(), 2 * each + 1);
  const auto rows = repeat["memory_timeline_rows"];
  EXPECT_EQ(rows["count"].get<std::int64_t>(), 2 * each);  // a start and an end per task
  EXPECT_LT(result["memory_timeline"].size(), 1000u);
  EXPECT_LT(fs::file_size(dir / "s.json"), 1u << 20);
  EXPECT_LT(fs::file_size(dir / "c.json"), 1u << 20);
  const auto chrome = core::parse_json(core::read_file(dir / "c.json"), "c.json");
  int summaries = 0;
  for (const auto& e : chrome["traceEvents"]) summaries += e.value("cat", "") == "repeat";
  EXPECT_EQ(summaries, 1);
  fs::remove_all(dir);
}

TEST(Cli, PlanForAnotherOptimizerEstimatesItsState) {
  const fs::path dir = fs::temp_directory_path() / "headroom_cli_optimizer";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto sgd = run("plan " + kTrace + " --budget 300MiB --batch 32 --optimizer sgd -o " + (dir / "p.json").string());
  ASSERT_EQ(sgd.exit_code, 0) << sgd.err;
  EXPECT_NE(sgd.out.find("optimizer state estimated, not measured: profile with --optimizer sgd"), std::string::npos)
      << sgd.out;
  const auto plan = core::parse_json(core::read_file(dir / "p.json"), "p.json");
  EXPECT_EQ(plan["optimizer"], "sgd");
  const auto sim = run("simulate " + (dir / "p.json").string() + " -o " + (dir / "s.json").string());
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const auto result = core::parse_json(core::read_file(dir / "s.json"), "s.json");
  EXPECT_EQ(result["simulated"]["peak_bytes"], result["planned"]["peak_bytes"]);
  expect_one_line_error(run("plan " + kTrace + " --budget 300MiB --batch 32 --optimizer lion -o " + (dir / "q.json").string()),
                        "--optimizer");
  fs::remove_all(dir);
}

// One trace of two precisions: the plan is for the trace's own unless --precision picks the other,
// prints each one's plan side by side, and the plan executes in its own precision.
TEST(Cli, ATraceOfSeveralPrecisionsIsPlannedInTheOneChosen) {
  const fs::path dir = fs::temp_directory_path() / "headroom_cli_precisions";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string trace = (dir / "t.json").string();
  const auto profiled = run("profile " + kSmallMlp + " --precision fp32,bf16 -o " + trace);
  ASSERT_EQ(profiled.exit_code, 0) << profiled.err;
  EXPECT_NE(profiled.out.find(", bf16\n"), std::string::npos) << profiled.out;
  const core::Trace read = core::read_trace_file(trace);
  ASSERT_EQ(read.precision_list(), "fp32, bf16");
  EXPECT_EQ(read.other_precisions[0].param_bytes() * 2, read.param_bytes());

  const std::string plan = (dir / "p.json").string();
  const auto own = run("plan " + trace + " --budget 64MiB --batch 4 -o " + plan);
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(core::read_plan_file(plan).precision, core::Precision::Fp32);
  EXPECT_NE(own.out.find("each precision the trace measured, planned alike"), std::string::npos) << own.out;
  EXPECT_NE(own.out.find("fp32 *"), std::string::npos) << own.out;
  const auto chosen = run("plan " + trace + " --budget 64MiB --batch 4 --precision bf16 -o " + plan);
  ASSERT_EQ(chosen.exit_code, 0) << chosen.err;
  EXPECT_NE(chosen.out.find("bf16 *"), std::string::npos) << chosen.out;
  EXPECT_EQ(core::read_plan_file(plan).precision, core::Precision::Bf16);
  const auto executed = run("execute " + plan + " --steps 1 -o " + (dir / "r.json").string());
  ASSERT_EQ(executed.exit_code, 0) << executed.err;
  EXPECT_NE(executed.out.find("in bf16"), std::string::npos) << executed.out;
  expect_one_line_error(run("plan " + trace + " --budget 64MiB --batch 4 --precision bf16-autocast -o " + plan),
                        "--precision: " + trace + " measured the step in fp32, bf16, not bf16-autocast");
  expect_one_line_error(run("plan " + trace + " --budget 64MiB --batch 4 --precision fp8 -o " + plan),
                        "--precision: 'fp8' is not a precision");
  // Tempo layers are profiled in bf16 too; a precision they do not run in is refused by name.
  ASSERT_TRUE(read.other_precisions[0].has_tempo());
  const auto tempo = run("plan " + trace + " --budget 64MiB --batch 4 --precision bf16 --strategies tempo -o " + plan);
  ASSERT_EQ(tempo.exit_code, 0) << tempo.err;
  core::Trace fp16 = read;
  fp16.precision = core::Precision::Fp16Autocast;
  fp16.other_precisions.clear();
  fp16.tempo_steps.clear();
  for (auto& layer : fp16.layers) layer.tempo.reset();
  const std::string fp16_trace = (dir / "t16.json").string();
  core::write_file_atomically(fp16_trace, core::to_json(fp16).dump(2) + "\n");
  expect_one_line_error(run("plan " + fp16_trace + " --budget 64MiB --batch 4 --strategies tempo -o " + plan),
                        "--strategies tempo: Tempo layers are profiled in fp32 and, on the CPU, bf16-autocast and "
                        "bf16 only, and this trace measured fp16-autocast");
  expect_one_line_error(run("plan " + trace + " --budget 64MiB --batch 4 --precision '' -o " + plan),
                        "--precision: expected a precision");
  {
    // On a CPU without bfloat16 instructions (as oneDNN is capped here) the plan and the comparison say
    // that the bf16 times are not this machine's.
    const testing::ScopedEnv capped("DNNL_MAX_CPU_ISA", "AVX2");
    const auto emulated = run("plan " + trace + " --budget 64MiB --batch 4 --precision bf16 -o " + plan);
    ASSERT_EQ(emulated.exit_code, 0) << emulated.err;
    EXPECT_NE(emulated.out.find("warning          this CPU has no native bfloat16 arithmetic (no avx512_bf16 or amx_bf16): "
                                "the plan's bf16 times hold for a CPU that has it"),
              std::string::npos)
        << emulated.out;
    EXPECT_NE(emulated.out.find("  bf16: this CPU has no native bfloat16 arithmetic; the samples/s above are for a CPU"),
              std::string::npos)
        << emulated.out;
    EXPECT_EQ(run("plan " + trace + " --budget 64MiB --batch 4 -o " + plan).out.find("no native bfloat16 arithmetic (no"),
              std::string::npos);  // the fp32 plan's own times hold
  }
  fs::remove_all(dir);
}

TEST(Cli, BadPlanInputsExitWithTwo) {
  const fs::path dir = fs::temp_directory_path() / "headroom_cli_badplan";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string out = " -o " + (dir / "p.json").string();
  core::write_file_atomically(dir / "broken.json", "{\"schema\": \"headroom.trace/1\",");
  expect_one_line_error(run("plan /nonexistent.json --budget 1GiB --batch 8" + out), "/nonexistent.json");
  expect_one_line_error(run("plan " + (dir / "broken.json").string() + " --budget 1GiB --batch 8" + out), "malformed JSON");
  expect_one_line_error(run("plan " + kTrace + " --budget 12MB --batch 8" + out), "'12MB'");
  expect_one_line_error(run("plan " + kTrace + " --budget 1GiB --batch 0" + out), "--batch");
  expect_one_line_error(run("plan " + kTrace + " --budget 1GiB --batch 8 --strategies mbp,warp" + out), "'warp'");
  expect_one_line_error(run("plan " + std::string(HEADROOM_TRACES_DIR) + "/cpu-cnn.json --budget 1GiB --batch 8 --strategies l2l" + out),
                        "--strategies l2l: L2L cannot run cnn: its BatchNorm layer");
  expect_one_line_error(run("plan " + kTrace + " --budget 1GiB --batch 8 --strategies mbp,infcl" + out),
                        "the trace has no contrastive loss measurements");
  const std::string cnn = std::string(HEADROOM_TRACES_DIR) + "/cpu-cnn.json";
  expect_one_line_error(run("plan " + cnn + " --budget 1GiB --batch 8 --strategies mbp,tempo" + out),
                        "the trace has no Tempo-layer measurements");
  EXPECT_FALSE(fs::exists(dir / "p.json"));
  fs::remove_all(dir);
}

// What else the budget trains with L2L follows a plan that uses L2L or one asked for l2l by
// name, not one "all" made without it.
TEST(Cli, L2LCapacityIsPrintedWhereL2LIsNamedOrChosen) {
  const fs::path out = fs::temp_directory_path() / "headroom_cli_capacity.json";
  const std::string capacity = "largest model L2L trains under 1.00 GiB";
  const auto named = run("plan " + kTrace + " --budget 1GiB --batch 8 --strategies mbp,l2l -o " + out.string());
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_FALSE(core::parse_json(core::read_file(out), out.string()).contains("l2l"));
  EXPECT_NE(named.out.find(capacity), std::string::npos) << named.out;
  const auto all = run("plan " + kTrace + " --budget 1GiB --batch 8 -o " + out.string());
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.out.find("largest model L2L trains"), std::string::npos) << all.out;
  fs::remove(out);
}

TEST(Cli, InfeasibleBudgetExitsWithThreeAndNamesTheLeastBudget) {
  const fs::path out = fs::temp_directory_path() / "headroom_cli_infeasible.json";
  fs::remove(out);
  // Without L2L the training state is the floor, and the answer says what L2L would need.
  const auto r = run("plan " + kTrace + " --budget 50MiB --batch 8 --strategies mbp,checkpoint,tempo -o " + out.string());
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("the budget must be at least"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("parameters, gradients and optimizer state"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; with l2l as well (--strategies mbp,checkpoint,tempo,l2l) it must be at least "), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out));
  // "all" (the default) holds L2L: its least counts L2L, and that budget fits.
  const auto all = run("plan " + kTrace + " --budget 50MiB --batch 8 -o " + out.string());
  EXPECT_EQ(all.exit_code, 3) << all.err;
  EXPECT_NE(all.err.find("with strategies mbp,checkpoint,tempo,l2l the step needs at least"), std::string::npos) << all.err;
  EXPECT_EQ(all.err.find("parameters, gradients and optimizer state"), std::string::npos) << all.err;
  const std::string marker = "so the budget must be at least ";
  const std::string least = all.err.substr(all.err.find(marker) + marker.size());
  const auto with_l2l = run("plan " + kTrace + " --budget '" + least.substr(0, least.find('\n')) + "' --batch 8 -o " + out.string());
  ASSERT_EQ(with_l2l.exit_code, 0) << with_l2l.err;
  EXPECT_TRUE(core::parse_json(core::read_file(out), out.string()).contains("l2l"));
  // "all" beside names is all; "none" stands alone.
  EXPECT_EQ(run("plan " + kTrace + " --budget 1GiB --batch 8 --strategies all,l2l -o " + out.string()).exit_code, 0);
  expect_one_line_error(run("plan " + kTrace + " --budget 1GiB --batch 8 --strategies none,mbp -o " + out.string()),
                        "'none' stands alone");
  fs::remove(out);
}

TEST(Cli, SimulateRejectsBadPlansAndChangedTraces) {
  const fs::path dir = fs::temp_directory_path() / "headroom_cli_badsim";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kTrace, dir / "t.json");
  ASSERT_EQ(run("plan " + (dir / "t.json").string() + " --budget 400MiB --batch 16 -o " + (dir / "p.json").string()).exit_code, 0);
  auto plan = core::parse_json(core::read_file(dir / "p.json"), "p.json");

  auto wrong_schema = plan;
  wrong_schema["schema"] = "headroom.trace/1";
  core::write_file_atomically(dir / "wrong.json", wrong_schema.dump());
  expect_one_line_error(run("simulate " + (dir / "wrong.json").string()), "$.schema");

  auto missing = plan;
  missing["trace"]["path"] = (dir / "gone.json").string();
  core::write_file_atomically(dir / "missing.json", missing.dump());
  expect_one_line_error(run("simulate " + (dir / "missing.json").string()), "does not exist");

  auto uneven = plan;
  uneven["micro_batches"] = nlohmann::json::array({5, 5});
  core::write_file_atomically(dir / "uneven.json", uneven.dump());
  expect_one_line_error(run("simulate " + (dir / "uneven.json").string()), "$.micro_batches: sizes sum to 10");

  // The trace changes after planning: its digest no longer matches.
  core::write_file_atomically(dir / "t.json", core::read_file(dir / "t.json") + " ");
  expect_one_line_error(run("simulate " + (dir / "p.json").string()), "changed since planning");
  fs::remove_all(dir);
}

TEST(Cli, ExecuteReportsAndRefusesBadInput) {
  const fs::path dir = fs::temp_directory_path() / "headroom_cli_execute";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string trace = std::string(HEADROOM_TRACES_DIR) + "/cpu-mlp.json";
  ASSERT_EQ(run("plan " + trace + " --budget 20MiB --batch 64 -o " + (dir / "p.json").string()).exit_code, 0);
  const auto ok = run("execute " + (dir / "p.json").string() + " --steps 2 -o " + (dir / "r.json").string());
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const auto report = core::parse_json(core::read_file(dir / "r.json"), "r.json");
  EXPECT_EQ(report["schema"], "headroom.report/1");
  EXPECT_EQ(report["status"], "ok");
  EXPECT_LE(report["measured"]["peak_bytes"].get<std::int64_t>(), report["budget_bytes"].get<std::int64_t>());
  EXPECT_LT(report["gradient_check"]["max_rel_diff"].get<double>(), 1e-5);
  EXPECT_NE(ok.out.find("peak memory"), std::string::npos) << ok.out;

  // A plan whose budget cannot hold it: out of memory, reported, exit 1.
  auto tight = core::parse_json(core::read_file(dir / "p.json"), "p.json");
  tight["budget_bytes"] = 8 << 20;
  core::write_file_atomically(dir / "tight.json", tight.dump());
  const auto oom = run("execute " + (dir / "tight.json").string() + " -o " + (dir / "oom.json").string());
  EXPECT_EQ(oom.exit_code, 1);
  EXPECT_NE(oom.err.find("out of memory under the 8.00 MiB budget"), std::string::npos) << oom.err;
  EXPECT_EQ(core::parse_json(core::read_file(dir / "oom.json"), "oom.json")["status"], "out_of_memory");

  expect_one_line_error(run("execute /nonexistent/plan.json"), "/nonexistent/plan.json");
  expect_one_line_error(run("execute " + (dir / "p.json").string() + " --data imagenet"), "imagenet");
  expect_one_line_error(run("execute " + (dir / "p.json").string() + " --steps 0"), "--steps: at least one measured step");
  expect_one_line_error(run("execute " + (dir / "p.json").string() + " --warmup=-1"), "--warmup: expected zero or more");
  fs::copy_file(trace, dir / "t.json");
  ASSERT_EQ(run("plan " + (dir / "t.json").string() + " --budget 20MiB --batch 64 -o " + (dir / "q.json").string()).exit_code, 0);
  core::write_file_atomically(dir / "t.json", core::read_file(dir / "t.json") + "\n");
  expect_one_line_error(run("execute " + (dir / "q.json").string()), "changed since planning");
  fs::remove_all(dir);
}

// A trace and a report name their host-memory regime (core/host_memory.h); planning or executing a trace
// measured in another regime (or before regimes were recorded) warns.
// L2L end to end: a budget below what micro-batching and checkpointing need, L2L
// planned, simulated and executed within it, the device peak as predicted.
TEST(Cli, L2LPlanRunsWithinItsBudget) {
  const fs::path dir = fs::temp_directory_path() / ("headroom_cli_l2l." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string trace = std::string(HEADROOM_TRACES_DIR) + "/cpu-mlp.json";
  const std::string plan = (dir / "p.json").string();
  const auto ordinary = run("plan " + trace + " --budget 4.3MiB --batch 8 --strategies mbp,checkpoint -o " + plan);
  EXPECT_EQ(ordinary.exit_code, 3) << ordinary.err;
  const auto planned = run("plan " + trace + " --budget 4.3MiB --batch 8 --strategies mbp,checkpoint,l2l -o " + plan);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_NE(planned.out.find("largest model L2L trains under 4.30 MiB"), std::string::npos) << planned.out;
  EXPECT_NE(planned.out.find("l2l              the whole model, boundaries on the "), std::string::npos) << planned.out;
  EXPECT_TRUE(core::parse_json(core::read_file(plan), plan).contains("l2l"));
  const auto simulated = run("simulate " + plan);
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  EXPECT_NE(simulated.out.find("0.000%"), std::string::npos) << simulated.out;
  const auto executed = run("execute " + plan + " --steps 2 -o " + (dir / "r.json").string());
  ASSERT_EQ(executed.exit_code, 0) << executed.err;
  EXPECT_NE(executed.out.find("L2L: "), std::string::npos) << executed.out;
  const auto report = core::parse_json(core::read_file(dir / "r.json"), "r.json");
  EXPECT_EQ(report["status"], "ok");
  EXPECT_LE(report["measured"]["peak_bytes"].get<std::int64_t>(), report["budget_bytes"].get<std::int64_t>());
  EXPECT_LE(report["errors"]["peak_rel"].get<double>(), 0.02);
  EXPECT_LT(report["gradient_check"]["max_rel_diff"].get<double>(), 1e-5);
  EXPECT_GT(report["l2l"]["measured_host_peak_bytes"].get<std::int64_t>(), report["measured"]["peak_bytes"].get<std::int64_t>());

  // Hand-edited to offload from block 2 on (blocks 0 and 1 kept on the device, with their Adam
  // state) under a larger budget: simulate's peak is what execute measures, to the byte.
  auto later = core::parse_json(core::read_file(plan), plan);
  later["l2l"]["from_block"] = 2;
  later["budget_bytes"] = 4 * later["budget_bytes"].get<std::int64_t>();
  const std::string later_plan = (dir / "from2.json").string();
  core::write_file_atomically(later_plan, later.dump());
  const auto later_simulated = run("simulate " + later_plan + " -o " + (dir / "s2.json").string());
  ASSERT_EQ(later_simulated.exit_code, 0) << later_simulated.err;
  const auto later_executed = run("execute " + later_plan + " --steps 2 -o " + (dir / "r2.json").string());
  ASSERT_EQ(later_executed.exit_code, 0) << later_executed.err;
  EXPECT_NE(later_executed.out.find("the first 2 kept on the device"), std::string::npos) << later_executed.out;
  const auto sim2 = core::parse_json(core::read_file(dir / "s2.json"), "s2.json");
  const auto report2 = core::parse_json(core::read_file(dir / "r2.json"), "r2.json");
  EXPECT_EQ(report2["l2l"]["kept_stages"], 2);
  EXPECT_EQ(report2["measured"]["peak_bytes"], sim2["simulated"]["peak_bytes"]);
  EXPECT_GT(report2["measured"]["peak_bytes"].get<std::int64_t>(), report["measured"]["peak_bytes"].get<std::int64_t>());
  EXPECT_LT(report2["l2l"]["measured_host_peak_bytes"].get<std::int64_t>(), report["l2l"]["measured_host_peak_bytes"].get<std::int64_t>());
  fs::remove_all(dir);
}

TEST(Cli, ATraceFromAnotherRegimeIsWarnedAbout) {
  const fs::path dir = fs::temp_directory_path() / "headroom_cli_regime";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto warns = [](const nlohmann::json& plan) {
    for (const auto& w : plan["warnings"]) {
      if (w.get<std::string>().find("another host-memory regime") != std::string::npos) return true;
    }
    return false;
  };
  ASSERT_EQ(run("profile " + kSmallMlp + " -o " + (dir / "t.json").string()).exit_code, 0);
  auto trace = core::parse_json(core::read_file(dir / "t.json"), "t.json");
  const std::string regime = trace["host_memory"]["regime"];
  EXPECT_NE(regime.find("mmap_threshold="), std::string::npos) << regime;

  ASSERT_EQ(run("plan " + (dir / "t.json").string() + " --budget 1GiB --batch 4 -o " + (dir / "p.json").string()).exit_code, 0);
  EXPECT_FALSE(warns(core::parse_json(core::read_file(dir / "p.json"), "p.json")));
  const auto ran = run("execute " + (dir / "p.json").string() + " --steps 1 -o " + (dir / "r.json").string());
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const auto report = core::parse_json(core::read_file(dir / "r.json"), "r.json");
  EXPECT_EQ(report["host_memory"]["regime"], regime);
  EXPECT_GT(report["host_memory"]["heap_peak_bytes"].get<std::int64_t>(), 0);
  EXPECT_NE(ran.out.find("host memory: malloc's heap"), std::string::npos) << ran.out;

  // A trace from before regimes were recorded.
  auto unrecorded = trace;
  unrecorded.erase("host_memory");
  core::write_file_atomically(dir / "old.json", unrecorded.dump());
  ASSERT_EQ(run("plan " + (dir / "old.json").string() + " --budget 1GiB --batch 4 -o " + (dir / "q.json").string()).exit_code, 0);
  EXPECT_TRUE(warns(core::parse_json(core::read_file(dir / "q.json"), "q.json")));

  trace["host_memory"]["regime"] = "libjemalloc.so.2 malloc";
  core::write_file_atomically(dir / "other.json", trace.dump());
  const auto planned = run("plan " + (dir / "other.json").string() + " --budget 1GiB --batch 4 -o " + (dir / "o.json").string());
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_NE(planned.out.find("(libjemalloc.so.2 malloc)"), std::string::npos) << planned.out;
  const auto executed = run("execute " + (dir / "o.json").string() + " --steps 1");
  ASSERT_EQ(executed.exit_code, 0) << executed.err;
  EXPECT_NE(executed.out.find("warning: the trace was measured in another host-memory regime (libjemalloc.so.2 malloc)"),
            std::string::npos)
      << executed.out;

  const auto both = run("execute " + (dir / "p.json").string() + " --host-limit --no-budget");
  EXPECT_EQ(both.exit_code, 2) << both.err;
  fs::remove_all(dir);
}

// `headroom demo` end to end, as a newcomer runs it first: the whole batch is refused under the
// budget, the plan runs within it with its peak predicted, and every file it names exists.
TEST(Cli, DemoRefusesTheWholeBatchAndRunsThePlanWithinTheBudget) {
  const CommandResult r = run("demo");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("the whole batch under this budget: "), std::string::npos) << r.out;
  const std::string marker = "files in ";
  const std::size_t at = r.out.find(marker);
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::size_t from = at + marker.size();
  const fs::path dir = r.out.substr(from, r.out.find(" (", from) - from);
  ASSERT_TRUE(fs::exists(dir / "trace.json") && fs::exists(dir / "plan.json")) << dir;
  const core::Report report = core::read_report_file(dir / "report.json");
  EXPECT_EQ(report.status, "ok");
  EXPECT_GT(report.budget_bytes, 0);
  EXPECT_LE(report.measured.peak_bytes, report.budget_bytes);
  EXPECT_LE(std::abs(report.peak_rel_error), 0.02);
  EXPECT_GE(report.steps, 5);  // at least two seconds as predicted, and never fewer than five steps
  fs::remove_all(dir);
}

TEST(Cli, ModelsListsTheZoo) {
  const CommandResult r = run("models");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* name : {"mlp", "cnn", "bert", "gpt", "preset", "large"}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
  }
}

// `headroom compare`: the CI recipe run for real. A committed trace against itself
// passes; the same trace with one layer's kept bytes 5% higher fails with exit 4, and that layer is
// the first row of the memory table; plans, reports, Markdown, JSON and bad input.
TEST(Cli, CompareFailsTheBuildOnMemoryGrowthNamingTheLayer) {
  const fs::path dir = fs::temp_directory_path() / ("headroom_cli_compare." + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string bert = std::string(HEADROOM_TRACES_DIR) + "/cpu-bert.json";
  CommandResult r = run("compare " + bert + " " + bert);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("PASS: no threshold passed"), std::string::npos) << r.out;

  nlohmann::json edited = core::parse_json(core::read_file(bert), "cpu-bert.json");
  for (auto& layer : edited["layers"]) {
    if (layer["name"] != "layer2.ffn_in") continue;
    for (auto& sample : layer["samples"]) {
      sample["kept_bytes"] = static_cast<std::int64_t>(std::llround(sample["kept_bytes"].get<double>() * 1.05));
    }
  }
  const std::string grown = (dir / "grown.json").string();
  core::write_file_atomically(grown, edited.dump());
  const std::string json_out = (dir / "compare.json").string();
  r = run("compare " + bert + " " + grown + " -o " + json_out);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  // The memory table's first row, after its header and rule, is the edited layer.
  const auto table = r.out.find("Memory by layer, largest change first\n");
  ASSERT_NE(table, std::string::npos) << r.out;
  std::size_t line = table;
  for (int i = 0; i < 3; ++i) line = r.out.find('\n', line) + 1;
  EXPECT_EQ(r.out.substr(line, r.out.find('\n', line) - line).rfind("layer2.ffn_in ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("FAIL (exit 4): layer layer2.ffn_in: kept bytes/sample +5.0%"), std::string::npos) << r.out;
  const nlohmann::json written = core::parse_json(core::read_file(json_out), "compare.json");
  EXPECT_EQ(written["schema"], "headroom.compare/1");
  EXPECT_EQ(written["passed"], false);
  EXPECT_EQ(written["layers"][0]["name"], "layer2.ffn_in");
  // A looser threshold lets it through; Markdown for a pull-request comment.
  r = run("compare " + bert + " " + grown + " --max-memory-growth 6% --format markdown");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| layer2.ffn_in | kept bytes/sample | 524288 | 550502 | +26214 | +5.0% |"), std::string::npos) << r.out;
  // Times from another host-memory regime are left out, and a slowdown check then cannot run.
  edited["host_memory"]["regime"] = "another regime";
  const std::string elsewhere = (dir / "elsewhere.json").string();
  core::write_file_atomically(elsewhere, edited.dump());
  r = run("compare " + bert + " " + elsewhere + " --max-memory-growth 6%");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("times left out: the traces were measured in different host-memory regimes"), std::string::npos);
  expect_one_line_error(run("compare " + bert + " " + elsewhere + " --max-slowdown 10%"), "--max-slowdown: times left out");

  // Two plans of the same trace at two budgets.
  const std::string tight = (dir / "tight.json").string(), loose = (dir / "loose.json").string();
  ASSERT_EQ(run("plan " + bert + " --budget 260MiB --batch 32 -o " + tight).exit_code, 0);
  ASSERT_EQ(run("plan " + bert + " --budget 600MiB --batch 32 -o " + loose).exit_code, 0);
  r = run("compare " + tight + " " + loose + " --max-memory-growth 200%");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("micro-batches"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("predicted peak bytes"), std::string::npos) << r.out;
  EXPECT_EQ(run("compare " + tight + " " + loose).exit_code, 4);
  // Two stage-3 plans: what each gathers at a time is in its workers row.
  const std::string gpt = (dir / "gpt.json").string();
  auto document = core::parse_json(core::read_file(std::string(HEADROOM_TRACES_DIR) + "/cpu-gpt.json"), "cpu-gpt.json");
  document["optimizer"]["largest_param_elements"] = 1 << 20;  // recorded by traces since sharding
  core::write_file_atomically(gpt, document.dump());
  const std::string per_block = (dir / "block.json").string(), per_layer = (dir / "layer.json").string();
  for (const auto& [unit, out] : {std::pair{"block", per_block}, std::pair{"layer", per_layer}}) {
    ASSERT_EQ(run("plan " + gpt + " --budget 200MiB --batch 16 --devices 2 --link 1GB/s,20us --shard 3 --gather " +
                  unit + " -o " + out).exit_code, 0);
  }
  r = run("compare " + per_block + " " + per_layer + " --max-memory-growth 200% --max-slowdown 200%");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("2, stage 3 (optimizer state, gradients and parameters sharded), per block"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2, stage 3 (optimizer state, gradients and parameters sharded), per layer"), std::string::npos) << r.out;
  // simulate says what the compute loses beside the collectives where the measured link says it loses any.
  r = run("simulate " + per_block);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("beside compute"), std::string::npos) << r.out;
  document["link"] = {{"bytes_per_second", 1e9}, {"latency_ns", 20000}, {"source", "measured"}, {"beside_compute", 1.0}};
  core::write_file_atomically(gpt, document.dump());
  const std::string shared = (dir / "shared.json").string();
  ASSERT_EQ(run("plan " + gpt + " --budget 200MiB --batch 16 --devices 2 --shard 3 -o " + shared).exit_code, 0);
  r = run("simulate " + shared);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("what the compute loses to the collectives running beside it (100% of their overlapped time"),
            std::string::npos) << r.out;

  // Bad input: kinds that differ, a missing file, a threshold that is not a percentage, a flag for traces.
  expect_one_line_error(run("compare " + bert + " " + tight), "a plan, but " + bert + " is a trace");
  expect_one_line_error(run("compare " + bert + " " + (dir / "missing.json").string()), "missing.json: no such file");
  expect_one_line_error(run("compare " + bert + " " + bert + " --max-memory-growth lots"), "--max-memory-growth: expected a percentage");
  expect_one_line_error(run("compare " + bert + " " + bert + " --max-memory-growth -1%"), "--max-memory-growth");
  expect_one_line_error(run("compare " + bert + " " + bert + " --format html"), "--format: expected text or markdown");
  expect_one_line_error(run("compare " + tight + " " + loose + " --budget 1GiB"), "--budget: applies to comparing traces only");
  expect_one_line_error(run("compare " + bert + " " + bert + " -o " + bert), "is this command's input");
  fs::remove_all(dir);
}

// bert mini (the committed trace) against bert tiny: two blocks fewer and every width halved.
TEST(Cli, CompareListsRemovedAndChangedLayers) {
  const fs::path dir = fs::temp_directory_path() / ("headroom_cli_compare_models." + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string tiny = (dir / "tiny.json").string();
  ASSERT_EQ(run("profile --model bert --set preset=tiny --batch-sizes 1,2 --repeats 1 --no-tempo -o " + tiny).exit_code, 0);
  const std::string bert = std::string(HEADROOM_TRACES_DIR) + "/cpu-bert.json";
  const CommandResult r = run("compare " + bert + " " + tiny + " --max-memory-growth 1000%");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("removed layers: layer2.qkv"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layer3.ffn_ln"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layer0.ffn_in "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("batch sizes in common: 1,2"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace headroom
