// `headroom execute --devices N` for real (executor/data_parallel.h): N worker processes on c10d's
// Gloo over loopback train an mlp. After 3 steps their weights equal one process
// stepping on each step's full batch; every worker's peak is the plan's; killing a worker mid-step
// stops them all, names its rank and leaves no report.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "core/cost_model.h"
#include "core/plan.h"
#include "core/report.h"
#include "core/sha256.h"
#include "core/trace.h"
#include "planner/data_parallel_model.h"
#include "planner/layer_graph.h"
#include "planner/optimizer_estimate.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "simulator/simulator.h"
#include "support/build_paths.h"
#include "support/run_headroom.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

testing::CommandResult run(const std::string& args) {
  return testing::run_headroom(args, "headroom_data_parallel_test.stderr");
}

// The committed mlp's model profiled here with SGD (with momentum) and one thread: Adam turns the
// last bits of a gradient that float sums leave into whole steps of its learning rate (its first
// step is lr * sign(g)), so weights are compared after SGD steps; SGD's state is then measured, not
// estimated, as the peak check needs.
const std::string& trace_path() {
  static const std::string path = [] {
    const fs::path file = fs::temp_directory_path() / ("headroom_dp_trace." + std::to_string(::getpid()) + ".json");
    const auto r = run("profile --model mlp --set input=256 --set hidden=512 --set depth=4 --optimizer sgd --threads 1 "
                       "--batch-sizes 1,2,4,8,16 --repeats 2 -o " + file.string());
    if (r.exit_code != 0) throw std::runtime_error("profiling the mlp failed: " + r.err);
    return file.string();
  }();
  return path;
}

// A model whose blocks hold several layers with parameters (the mlp's blocks hold one each), so a
// stage-3 worker's units per block and per layer differ, and whose blocks outweigh its embedding
// and head (a small vocabulary), so its peak falls inside a block, where they hold different
// bytes. Without dropout: --full-batch-reference runs with it off, and a mask the trace counts
// would not be kept.
const std::string& gpt_trace_path() {
  static const std::string path = [] {
    const fs::path file = fs::temp_directory_path() / ("headroom_dp_gpt_trace." + std::to_string(::getpid()) + ".json");
    const auto r = run("profile --model gpt --set preset=tiny --set hidden=256 --set heads=4 --set vocab=64 --set seq=32 "
                       "--set dropout=0 --optimizer sgd --threads 1 "
                       "--batch-sizes 1,2,4,8,16 --repeats 1 -o " + file.string());
    if (r.exit_code != 0) throw std::runtime_error("profiling the gpt failed: " + r.err);
    return file.string();
  }();
  return path;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A budget between the least any plan needs and what a worker's whole share needs, so each worker
// runs its share as several micro-batches.
// Checkpointing instead: each worker runs its share whole, some blocks checkpointed.
std::int64_t tight_budget(const core::Trace& trace, std::int64_t batch, int workers, int shard_stage = 0,
                          bool checkpointing = false) {
  planner::PlanRequest r;
  r.global_batch = batch;
  r.workers = workers;
  r.link = core::parse_link("1GB/s,20us");
  r.budget_bytes = 1;
  r.strategies = {checkpointing ? planner::Strategy::Checkpointing : planner::Strategy::MicroBatching};
  r.shard_stage = shard_stage;
  const std::int64_t least = planner::plan_step(trace, r).smallest_budget;
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  core::StepChoice whole = core::StepChoice{}.with_micro_batches({(batch + workers - 1) / workers});
  whole.data_parallel = core::DataParallelChoice{workers, {}, r.link, core::kDefaultBucketCapBytes, shard_stage};
  const std::int64_t need = planner::predict_step(costs, graph, whole).peak_bytes;
  // Both with the plan's 5% margin.
  return (least + static_cast<std::int64_t>(static_cast<double>(need) / 0.95)) / 2;
}

// One data-parallel run: the mlp's trace unless another is named; what stage 3 gathers left to the
// search unless named.
struct DataParallelCase {
  int workers = 2;
  std::string shard = "0";
  bool checkpointing = false;
  std::string gather{};
  std::string trace{};
  const std::string& trace_file() const { return trace.empty() ? trace_path() : trace; }
};

// Planned on the trace's own times, as tight_budget weighs them: rescaled to a machine timed beside
// other tests, the checkpointing search's choices (and so its least budget) can move past the budget.
fs::path make_plan(const fs::path& dir, std::int64_t batch, const DataParallelCase& c) {
  const core::Trace trace = core::read_trace_file(c.trace_file());
  const fs::path plan = dir / "plan.json";
  const std::int64_t budget = tight_budget(trace, batch, c.workers, std::stoi(c.shard), c.checkpointing);
  const auto r = run("plan " + c.trace_file() + " --budget " + std::to_string(budget) + " --batch " + std::to_string(batch) +
                     " --strategies " + (c.checkpointing ? "checkpoint" : "mbp") + " --devices " + std::to_string(c.workers) +
                     " --shard " + c.shard + (c.gather.empty() ? "" : " --gather " + c.gather) + " --link 1GB/s,20us --no-rescale -o " +
                     plan.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return plan;
}

fs::path make_plan(const fs::path& dir, std::int64_t batch, int workers, const std::string& shard = "0") {
  DataParallelCase c;
  c.workers = workers;
  c.shard = shard;
  return make_plan(dir, batch, c);
}

// Stage 3: at the plan's peak a worker holds a unit's gathered parameters and the next one's,
// prefetched, by more than the 2% the measured peaks are held to: a worker that did not prefetch
// would measure below the plan.
void expect_two_units_gathered_at_the_peak(const core::Plan& plan) {
  const core::Trace trace = core::read_trace_file(trace_path());
  ASSERT_EQ(plan.trace_path, trace_path());
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const auto sim = simulator::simulate(planner::build_schedule(costs, graph, plan.choice));
  ASSERT_EQ(sim.peak_bytes, plan.predicted.peak_bytes);
  std::int64_t largest_unit = 0, gathered_at_peak = 0;
  for (const auto& unit : planner::parameter_gathers(graph, plan.choice).units) largest_unit = std::max(largest_unit, unit.bytes);
  for (const auto& sample : sim.memory) {
    if (sample.total() == sim.peak_bytes) {
      gathered_at_peak = std::max(gathered_at_peak, sample.bytes[static_cast<std::size_t>(core::MemoryKind::GatheredParameter)]);
    }
  }
  EXPECT_GT(gathered_at_peak, largest_unit);
  EXPECT_GT(static_cast<double>(gathered_at_peak - largest_unit), 0.02 * static_cast<double>(plan.predicted.peak_bytes));
}

void weights_equal_the_full_batch_steps(const DataParallelCase& c) {
  const int workers = c.workers;
  const bool checkpointing = c.checkpointing;
  const fs::path dir = fresh_dir("headroom_dp_" + std::to_string(workers) + "_" + c.shard + (checkpointing ? "_ckpt" : "") +
                                 (c.trace.empty() ? "" : "_gpt") + c.gather);
  const fs::path plan_path = make_plan(dir, 26, c);
  const core::Plan plan = core::read_plan_file(plan_path);
  if (!c.gather.empty()) EXPECT_EQ(core::gather_unit_name(plan.choice.data_parallel->gather), c.gather);
  ASSERT_EQ(plan.choice.workers(), workers);
  if (checkpointing) {
    EXPECT_FALSE(plan.choice.checkpointed_blocks.empty()) << "the budget should need checkpointing";
  } else {
    EXPECT_GT(plan.choice.worker_micro_batches(0).size(), 1u) << "the budget should need micro-batches";
  }
  const fs::path report_path = dir / "report.json";
  const auto r = run("execute " + plan_path.string() + " --devices " + std::to_string(workers) +
                     " --steps 3 --warmup 0 --full-batch-reference -o " + report_path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const core::Report report = core::read_report_file(report_path);
  ASSERT_TRUE(report.data_parallel);
  const auto& dp = *report.data_parallel;
  EXPECT_EQ(dp.world_size, workers);
  EXPECT_EQ(dp.backend, "gloo");
  EXPECT_EQ(dp.weight_checks, 3);
  ASSERT_TRUE(dp.full_batch_weights_max_rel_diff);
  EXPECT_LE(*dp.full_batch_weights_max_rel_diff, 1e-5);
  // The exchanged gradient at the start equals the full batch's too.
  EXPECT_TRUE(report.gradient_check.computed);
  EXPECT_LE(report.gradient_check.max_rel_diff, 1e-5);
  ASSERT_EQ(dp.workers.size(), static_cast<std::size_t>(workers));
  // Each worker bound to its share of the CPUs this test may use, unbound where they are fewer than the workers.
  cpu_set_t allowed;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  const int cpus = CPU_COUNT(&allowed);
  std::int64_t samples = 0;
  for (const auto& w : dp.workers) {
    EXPECT_EQ(w.cpus, cpus >= workers ? cpus / workers : cpus) << w.rank;
    samples += w.samples;
    // Each worker under its own budget; worker 0 carries the most, so its peak is the plan's and
    // the others' at most that.
    EXPECT_LE(w.peak_bytes, plan.budget_bytes) << w.rank;
    EXPECT_LE(static_cast<double>(w.peak_bytes), 1.02 * static_cast<double>(plan.predicted.peak_bytes)) << w.rank;
  }
  EXPECT_EQ(samples, 26);
  EXPECT_LE(std::abs(report.peak_rel_error), 0.02) << report.measured.peak_bytes << " vs " << plan.predicted.peak_bytes;
  // The gpt's peak inside a block: what a stage-3 worker holds there is the plan's unit by unit.
  if (!c.trace.empty()) {
    EXPECT_LE(std::abs(report.peak_rel_error), 1e-3) << report.measured.peak_bytes << " vs " << plan.predicted.peak_bytes;
  }
  EXPECT_NE(r.out.find("weights identical on every worker"), std::string::npos) << r.out;
  EXPECT_EQ(dp.shard_stage, plan.choice.data_parallel->shard_stage);
  if (dp.shard_stage > 0 && dp.shard_stage < 3) {
    EXPECT_GT(dp.broadcast_seconds, 0);
    EXPECT_GT(dp.predicted_broadcast_seconds, 0);
  }
  if (dp.shard_stage >= 3) {
    EXPECT_EQ(dp.broadcast_seconds, 0);
    EXPECT_GT(dp.gather_seconds, 0);
    EXPECT_GT(dp.predicted_gather_seconds, 0);
    // Checkpointed, a recompute keeps its unit's parameters for their backward as well; the gpt's
    // peak is at its head, whose next gather is its own.
    if (!checkpointing && c.trace.empty()) expect_two_units_gathered_at_the_peak(plan);
  }
  if (dp.shard_stage >= 2) {
    EXPECT_EQ(dp.buckets, 0);
    EXPECT_GT(dp.gradient_reduce_seconds, 0);
    EXPECT_GT(dp.predicted_gradient_reduce_seconds, 0);
    // The reduces the plan times, no more: a collective per owner whose range a buffer spans.
    const core::Trace trace = core::read_trace_file(c.trace_file());
    const std::int64_t per_micro_batch =
        planner::gradient_reduce_collectives(core::CostModel(trace), planner::LayerGraph(trace), plan.choice);
    EXPECT_EQ(dp.gradient_reduces, per_micro_batch * static_cast<std::int64_t>(plan.choice.worker_micro_batches(0).size()));
  }
  fs::remove_all(dir);
}

TEST(DataParallel, TwoWorkersEndWithTheFullBatchWeights) { weights_equal_the_full_batch_steps({.workers = 2}); }
// ZeRO's stage 1: each worker steps its range of the parameters (its share of the momentum) and
// broadcasts it; the weights are still the full batch's, every worker's the same.
TEST(DataParallel, ShardedOptimizerStateEndsWithTheFullBatchWeights) { weights_equal_the_full_batch_steps({.workers = 2, .shard = "1"}); }
TEST(DataParallel, ShardedOverThreeWorkersEndsWithTheFullBatchWeights) { weights_equal_the_full_batch_steps({.workers = 3, .shard = "1"}); }
// ZeRO's stage 2: gradients packed into buffers as backward makes them, each buffer reduced to its
// owners (a collective per owner whose range it spans) once full, every micro-batch.
TEST(DataParallel, ShardedGradientsEndWithTheFullBatchWeights) { weights_equal_the_full_batch_steps({.workers = 2, .shard = "2"}); }
TEST(DataParallel, ShardedGradientsOverThreeWorkersEndWithTheFullBatchWeights) { weights_equal_the_full_batch_steps({.workers = 3, .shard = "2"}); }
// ZeRO's stage 3: each unit's parameters gathered for its forward and backward, and for a
// checkpointed block's recompute, which keeps them for its backward.
TEST(DataParallel, ShardedParametersEndWithTheFullBatchWeights) { weights_equal_the_full_batch_steps({.workers = 2, .shard = "3"}); }
TEST(DataParallel, ShardedParametersOverThreeWorkersEndWithTheFullBatchWeights) { weights_equal_the_full_batch_steps({.workers = 3, .shard = "3"}); }
// The gpt's blocks gathered whole: a unit's parameters held from its first layer to its last,
// forward, recompute and backward; and its layers' gathered one at a time where the plan says so.
TEST(DataParallel, ShardedParametersPerBlockEndWithTheFullBatchWeights) {
  weights_equal_the_full_batch_steps({.shard = "3", .checkpointing = false, .gather = "block", .trace = gpt_trace_path()});
}
TEST(DataParallel, ShardedParametersPerBlockRecomputedEndWithTheFullBatchWeights) {
  weights_equal_the_full_batch_steps({.shard = "3", .checkpointing = true, .gather = "block", .trace = gpt_trace_path()});
}
TEST(DataParallel, ShardedParametersPerLayerEndWithTheFullBatchWeights) {
  weights_equal_the_full_batch_steps({.shard = "3", .checkpointing = false, .gather = "layer", .trace = gpt_trace_path()});
}
// Recompute is tested on the gpt alone: a stage-3 worker's mlp activations are 0.2% of its peak,
// finer than the checkpoint search resolves, so no budget reliably asks the mlp to checkpoint.
TEST(DataParallel, ShardedParametersPerLayerRecomputedEndWithTheFullBatchWeights) {
  weights_equal_the_full_batch_steps({.shard = "3", .checkpointing = true, .gather = "layer", .trace = gpt_trace_path()});
}
TEST(DataParallel, FourWorkersEndWithTheFullBatchWeights) { weights_equal_the_full_batch_steps({.workers = 4}); }

// Data parallel under bf16: the bfloat16 gradients are all-reduced as float32 (Gloo in libtorch
// 1.13 has no bfloat16 sum), in buffers twice their bytes that the plan counts; each worker runs
// within its budget at the plan's peak, the workers' weights stay identical, and the exchanged
// gradient is no further from the float32 full batch's than the full batch's in bf16 is.
TEST(DataParallel, Bf16GradientsAreSummedAsFloat32) {
  const fs::path dir = fresh_dir("headroom_dp_bf16");
  const std::string trace_file = (dir / "trace.json").string();
  auto r = run("profile --model mlp --set input=256 --set hidden=512 --set depth=4 --optimizer sgd --threads 1 "
               "--precision bf16 --batch-sizes 1,2,4,8,16 --repeats 2 -o " + trace_file);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::int64_t budget = tight_budget(core::read_trace_file(trace_file), 26, 2);
  const fs::path plan_path = dir / "plan.json";
  // Buckets of at least 256 KiB of float32 gradients: several, grouped as the planner groups them.
  const std::string plan_command = "plan " + trace_file + " --budget " + std::to_string(budget) +
                                   " --batch 26 --strategies mbp --devices 2 --link 1GB/s,20us --bucket-cap 256KiB -o " +
                                   plan_path.string();
  r = run(plan_command);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Its micro-batch sizes profiled in, as `execute` tells a user to: between profiled sizes bfloat16
  // scratch memory can step where the line does not see it, by CPU.
  std::set<std::int64_t> sizes;
  const core::Trace profiled = core::read_trace_file(trace_file);
  for (const std::int64_t b : core::read_plan_file(plan_path).choice.micro_batches) {
    if (profiled.batch_index(b) < 0) sizes.insert(b);
  }
  std::string lacking;
  for (const std::int64_t b : sizes) lacking += (lacking.empty() ? "" : ",") + std::to_string(b);
  if (!lacking.empty()) {
    r = run("profile --model mlp --set input=256 --set hidden=512 --set depth=4 --optimizer sgd --threads 1 --precision bf16 "
            "--batch-sizes " + lacking + " --repeats 2 --add-to " + trace_file + " -o " + trace_file);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run(plan_command);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const core::Trace trace = core::read_trace_file(trace_file);
  const core::Plan plan = core::read_plan_file(plan_path);
  EXPECT_EQ(plan.precision, core::Precision::Bf16);
  EXPECT_GT(plan.choice.worker_micro_batches(0).size(), 1u) << "the budget should need micro-batches";
  const fs::path report_path = dir / "report.json";
  r = run("execute " + plan_path.string() + " --devices 2 --steps 2 --warmup 1 -o " + report_path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const core::Report report = core::read_report_file(report_path);
  ASSERT_TRUE(report.data_parallel);
  const auto& dp = *report.data_parallel;
  EXPECT_EQ(dp.weight_checks, 3);  // after the warm-up step and each measured one
  std::int64_t parameter_bytes = 0;
  for (const auto& layer : trace.layers) parameter_bytes += layer.param_bytes;
  EXPECT_EQ(dp.bucket_bytes, 2 * parameter_bytes);
  const auto buckets = planner::plan_buckets(core::CostModel(trace), plan.choice);
  EXPECT_GT(buckets.size(), 1u);
  EXPECT_EQ(dp.buckets, static_cast<std::int64_t>(buckets.size()));
  for (const auto& w : dp.workers) {
    EXPECT_LE(w.peak_bytes, plan.budget_bytes) << w.rank;
    EXPECT_LE(w.peak_bytes, plan.predicted.peak_bytes) << w.rank;
  }
  EXPECT_GE(report.predicted.peak_bytes, report.measured.peak_bytes);
  EXPECT_LE(static_cast<double>(report.predicted.peak_bytes), 1.01 * static_cast<double>(report.measured.peak_bytes));
  ASSERT_TRUE(report.gradient_check.computed);
  ASSERT_TRUE(report.gradient_check.float32_max_rel_diff);
  EXPECT_LE(*report.gradient_check.float32_max_rel_diff, 2 * *report.gradient_check.reference_float32_max_rel_diff);
  EXPECT_LE(*report.gradient_check.float32_max_rel_diff, 0.1);
  fs::remove_all(dir);
}

// A contrastive model over 2 workers: each caches its share's embeddings, the
// loss over the global batch runs as Inf-CL's ring, each re-runs its micro-batches from its cached
// embedding gradients, and the towers' gradients are all-reduced. One SGD step ends where one
// process stepping on the whole batch does after three SGD steps (the mlp tests above say why not
// Adam); each worker's peak is the plan's.
TEST(DataParallel, AContrastiveModelTrainsOverTheRingInfCl) {
  const fs::path dir = fresh_dir("headroom_dp_clip");
  const std::string trace = std::string(HEADROOM_TRACES_DIR) + "/cpu-clip.json";
  const fs::path plan_path = dir / "plan.json";
  // 77 pairs: worker 0 caches 39 as 20 + 19, worker 1 38 as 19 + 19.
  auto r = run("plan " + trace + " --optimizer sgd --budget 2.3MiB --margin 0 --batch 77 --strategies mbp,infcl --devices 2 "
               "--link 1GB/s,20us -o " + plan_path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const core::Plan plan = core::read_plan_file(plan_path);
  ASSERT_EQ(plan.choice.workers(), 2);
  EXPECT_EQ(plan.choice.worker_micro_batches(0).size(), 2u) << "the budget should need micro-batches";
  // As planned: each worker's peak is the plan's. A warm-up step first: the gradient check leaves
  // no gradients allocated, the steps after it do.
  const fs::path planned_path = dir / "planned.json";
  r = run("execute " + plan_path.string() + " --devices 2 --steps 2 --warmup 1 -o " + planned_path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const core::Report planned = core::read_report_file(planned_path);
  ASSERT_TRUE(planned.data_parallel);
  EXPECT_TRUE(planned.gradient_check.computed);
  EXPECT_LE(planned.gradient_check.max_rel_diff, 1e-5);
  for (const auto& w : planned.data_parallel->workers) {
    EXPECT_LE(w.peak_bytes, plan.budget_bytes) << w.rank;
    EXPECT_LE(static_cast<double>(w.peak_bytes), 1.02 * static_cast<double>(plan.predicted.peak_bytes)) << w.rank;
  }
  EXPECT_LE(std::abs(planned.peak_rel_error), 0.02) << planned.measured.peak_bytes << " vs " << plan.predicted.peak_bytes;
  // Against one process on the whole batch: dropout is off on both sides, so the steps keep none of
  // its masks and each worker's peak is at most the plan's, by how much depends on the CPU's kernels.
  const fs::path report_path = dir / "report.json";
  r = run("execute " + plan_path.string() + " --devices 2 --steps 2 --warmup 1 --full-batch-reference -o " +
          report_path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const core::Report report = core::read_report_file(report_path);
  ASSERT_TRUE(report.data_parallel);
  const auto& dp = *report.data_parallel;
  ASSERT_TRUE(dp.full_batch_weights_max_rel_diff);
  EXPECT_LE(*dp.full_batch_weights_max_rel_diff, 1e-5);
  ASSERT_EQ(dp.workers.size(), 2u);
  EXPECT_EQ(dp.workers[0].samples + dp.workers[1].samples, 77);
  for (const auto& w : dp.workers) EXPECT_LE(w.peak_bytes, plan.predicted.peak_bytes) << w.rank;
  const auto says_dropout_off = [](const std::string& w) { return w.find("dropout off") != std::string::npos; };
  EXPECT_TRUE(std::any_of(report.warnings.begin(), report.warnings.end(), says_dropout_off));
  fs::remove_all(dir);
}

// Without tiles the ring runs one tile per pair of blocks: at 8192 pairs over 2 workers the ring's
// loss backward is a worker's peak (133 MiB), which the plan predicts to 2%. The budget leaves out
// micro-batches of 4096, whose convolution backward would be the peak (151 MiB) and which the
// trace's times may make the fastest.
TEST(DataParallel, TheRingLossIsPlannedWhereItIsTheWorkersPeak) {
  const fs::path dir = fresh_dir("headroom_dp_clip_ring");
  const std::string trace_file = std::string(HEADROOM_TRACES_DIR) + "/cpu-clip.json";
  const fs::path plan_path = dir / "plan.json";
  auto r = run("plan " + trace_file + " --optimizer sgd --budget 145MiB --margin 0 --batch 8192 --strategies mbp --devices 2 "
               "--link 1GB/s,20us -o " + plan_path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const core::Plan plan = core::read_plan_file(plan_path);
  ASSERT_FALSE(plan.choice.loss_tiles);
  const core::Trace trace = planner::with_estimated_optimizer(core::read_trace_file(trace_file), "sgd");
  const auto predicted = planner::predict_step(core::CostModel(trace), planner::LayerGraph(trace), plan.choice);
  EXPECT_EQ(predicted.peak_bytes, plan.predicted.peak_bytes);
  EXPECT_NE(predicted.peak_at.find("backward of loss"), std::string::npos) << predicted.peak_at;
  const fs::path report_path = dir / "report.json";
  r = run("execute " + plan_path.string() + " --devices 2 --steps 1 --warmup 1 -o " + report_path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const core::Report report = core::read_report_file(report_path);
  EXPECT_LE(std::abs(report.peak_rel_error), 0.02) << report.measured.peak_bytes << " vs " << plan.predicted.peak_bytes;
  fs::remove_all(dir);
}

// The launcher's children: the workers, by rank.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

std::string cmdline(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (auto& c : text) {
    if (c == '\0') c = ' ';
  }
  return text;
}

void killing_a_worker_stops_all_and_names_its_rank(const std::string& shard) {
  const fs::path dir = fresh_dir("headroom_dp_kill_" + shard);
  const fs::path plan = make_plan(dir, 26, 2, shard);
  const fs::path report = dir / "report.json";
  const fs::path err = dir / "stderr";
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, STDERR_FILENO);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::execl(HEADROOM_BINARY, HEADROOM_BINARY, "execute", plan.c_str(), "--devices", "2", "--steps", "100000", "--warmup", "0",
            "-o", report.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until the workers are training (worker 1 has started its steps), then kill worker 1.
  pid_t victim = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (victim < 0 && std::chrono::steady_clock::now() < deadline) {
    for (const pid_t child : children_of(launcher)) {
      if (cmdline(child).find("--rank 1 ") != std::string::npos) victim = child;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(victim, 0) << "no worker 1 appeared";
  // Past joining, the gradient check and a few steps: mid-step, in all likelihood.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  const std::vector<pid_t> workers = children_of(launcher);
  ASSERT_EQ(workers.size(), 2u) << "the workers should still be running";
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string text = core::read_file(err);
  EXPECT_NE(text.find("worker rank 1 of 2 failed: killed by signal 9"), std::string::npos) << text;
  EXPECT_NE(text.find("stopped the others (ranks 0)"), std::string::npos) << text;
  EXPECT_NE(text.find("no report written"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(report));
  // No worker is left running.
  for (const pid_t w : workers) EXPECT_NE(::kill(w, 0), 0) << w;
  EXPECT_TRUE(children_of(launcher).empty());
  fs::remove_all(dir);
}

TEST(DataParallel, KillingAWorkerStopsAllAndNamesItsRank) { killing_a_worker_stops_all_and_names_its_rank("0"); }
// At stage 3 the survivor waits in a layer's gather that never comes.
TEST(DataParallel, KillingAShardedWorkerStopsAllAndNamesItsRank) { killing_a_worker_stops_all_and_names_its_rank("3"); }

}  // namespace
}  // namespace headroom
