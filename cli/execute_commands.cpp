#include "cli/execute_commands.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <sstream>
#include <thread>

#include <ATen/Parallel.h>

#include "cli/worker_launch.h"
#include "core/atomic_file.h"
#include "core/cost_model.h"
#include "core/errors.h"
#include "core/host_memory.h"
#include "core/plan.h"
#include "core/rescale.h"
#include "core/sha256.h"
#include "core/statistics.h"
#include "core/units.h"
#include "executor/data_parallel.h"
#include "executor/executor.h"
#include "models/model_source.h"
#include "models/zoo.h"
#include "planner/plan_for_machine.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "planner/step_sequence.h"
#include "profiler/profiler.h"
#include "report/execution_report.h"
#include "report/plan_report.h"
#include "runtime/host_info.h"

namespace headroom::cli {

namespace {

// Progress on stderr: one updating line on a terminal. Elsewhere (a log, the desktop app reading
// it) a line per phase, and in a counted phase ("step 37/1000") one per tenth of it and its last:
// a thousand-step run wrote a thousand lines.
class ExecuteProgress {
 public:
  void operator()(const std::string& what) {
    if (!tty_ && !worth_a_line(what)) return;
    std::fprintf(stderr, tty_ ? "\rexecuting: %-30s" : "executing: %s\n", what.c_str());
    std::fflush(stderr);
  }
  void end() const {
    if (tty_) std::fprintf(stderr, "\n");
  }

 private:
  bool worth_a_line(const std::string& what) {
    long done = 0, total = 0;
    const auto space = what.rfind(' ');
    const bool counted = space != std::string::npos && std::sscanf(what.c_str() + space + 1, "%ld/%ld", &done, &total) == 2 &&
                         total > 0;
    const std::string phase = counted ? what.substr(0, space) : what;
    const long tenth = counted ? done * 10 / total : -1;
    const bool worth = !counted || phase != phase_ || tenth != tenth_ || done >= total;
    phase_ = phase;
    tenth_ = tenth;
    return worth;
  }

  bool tty_ = ::isatty(STDERR_FILENO) != 0;
  std::string phase_;
  long tenth_ = -1;
};

}  // namespace

namespace {

// The local workers `--devices` may start: each is a whole process with its own model and budget.
constexpr int kMaxLocalWorkers = 64;

// The data-parallel flags against each other and the plan; returns the workers to launch here
// (0: this process runs the plan itself).
int check_worker_flags(const ExecuteArgs& args, const core::Plan& plan) {
  const int planned = plan.choice.workers();
  const bool by_hand = args.rank >= 0 || args.world_size > 0 || !args.store.empty();
  if (args.devices != kDevicesNotGiven) {
    if (by_hand) throw core::InputError("--devices: give either --devices or --rank/--world-size/--store, not both");
    if (args.devices < 1 || args.devices > kMaxLocalWorkers) {
      throw core::InputError("--devices: expected from 1 to " + std::to_string(kMaxLocalWorkers) + " local workers, got " +
                             std::to_string(args.devices));
    }
    if (args.devices != planned) {
      throw core::InputError("--devices: the plan is for " + std::to_string(planned) + " worker(s), got " +
                             std::to_string(args.devices) + " (plan with --devices " + std::to_string(args.devices) + ")");
    }
    return args.devices > 1 ? args.devices : 0;
  }
  if (by_hand) {
    if (args.rank < 0 || args.world_size < 1 || args.store.empty()) {
      throw core::InputError("--rank: a worker launched by hand needs --rank, --world-size and --store together");
    }
    if (args.world_size > core::kMaxWorkers) {
      throw core::InputError("--world-size: expected from 1 to " + std::to_string(core::kMaxWorkers) + ", got " +
                             std::to_string(args.world_size));
    }
    if (args.rank >= args.world_size) {
      throw core::InputError("--rank: expected from 0 to " + std::to_string(args.world_size - 1) + ", got " +
                             std::to_string(args.rank));
    }
    if (args.world_size != planned) {
      throw core::InputError("--world-size: the plan is for " + std::to_string(planned) + " worker(s), got " +
                             std::to_string(args.world_size));
    }
    try {
      executor::check_store_address(args.store);
    } catch (const core::InputError& e) {
      throw core::InputError(std::string("--") + e.what());
    }
    return 0;
  }
  if (planned > 1) {
    throw core::InputError(args.plan + ": the plan is for " + std::to_string(planned) + " data-parallel workers: run it with "
                           "--devices " + std::to_string(planned) + " (or --rank/--world-size/--store for each worker)");
  }
  return 0;
}

// What a worker started by --devices runs with: the same flags, less the launch and the report.
std::vector<std::string> worker_arguments(const ExecuteArgs& args) {
  std::vector<std::string> out{args.plan, "--steps", std::to_string(args.steps), "--warmup", std::to_string(args.warmup),
                               "--device", args.device, "--data", args.data};
  if (args.no_budget) out.push_back("--no-budget");
  if (args.host_limit) out.push_back("--host-limit");
  if (args.batchnorm_eval) out.push_back("--batchnorm-eval");
  if (args.full_batch_reference) out.push_back("--full-batch-reference");
  return out;
}

}  // namespace

int run_execute(const ExecuteArgs& args) {
  const core::Plan plan = core::read_plan_file(args.plan);
  const core::Trace trace = core::load_plan_trace(plan, args.plan);
  // What the plan asks of the trace's layers and blocks is checked before anything runs.
  planner::check_choice(plan, trace, args.plan);
  if (const int local = check_worker_flags(args, plan); local > 0) {
    return launch_workers({local, worker_arguments(args), args.output});
  }
  executor::ExecuteOptions options;
  if (plan.choice.data_parallel) {
    // This process is one of the plan's workers (check_worker_flags said so); on one host they
    // share its cores.
    options.rank = args.rank;
    options.workers = args.world_size;
    options.store = args.store;
    options.threads = std::max(1, runtime::usable_cores() / args.world_size);
  }
  if (args.threads > 0) options.threads = args.threads;
  options.full_batch_reference = args.full_batch_reference;
  options.steps = args.steps;
  options.warmup_steps = args.warmup;
  options.device = args.device;
  options.enforce_budget = !args.no_budget;
  options.host_limit = args.host_limit;
  options.data = args.data;
  options.batchnorm_eval = args.batchnorm_eval;
  ExecuteProgress progress;
  options.on_progress = std::ref(progress);
  core::Report executed = executor::execute(plan, trace, args.plan, options);
  progress.end();
  if (!args.no_rescale) core::predict_for_the_run(plan, executed);
  // Worker 0 reports for all; the others only say how they ended.
  if (options.rank != 0) {
    if (executed.status != "ok") {
      std::cerr << "headroom: " << report::describe_out_of_memory(*executed.out_of_memory) << "\n";
      return 1;
    }
    std::cout << "worker " << options.rank << " of " << options.workers << ": done\n";
    return 0;
  }
  if (!args.output.empty()) core::write_report_file(args.output, executed);
  std::cout << report::render_report(executed);
  if (executed.status != "ok") {
    std::cerr << "headroom: " << report::describe_out_of_memory(*executed.out_of_memory) << "\n";
    return 1;
  }
  return 0;
}

namespace {

// The demo's global batch.
constexpr std::int64_t kDemoBatch = 32;

// Where the demo keeps its files: the directory given, else a new temporary one.
std::string demo_directory(const DemoArgs& args) {
  namespace fs = std::filesystem;
  std::string directory = args.directory;
  if (directory.empty()) {
    std::string pattern = (fs::temp_directory_path() / "headroom-demo-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot make a temporary directory");
    directory = pattern;
  }
  fs::create_directories(directory);
  return directory;
}

// Step 1: bert tiny profiled on the CPU, its trace written to `trace_path`.
core::Trace profile_demo_model(core::Precision precision, const std::string& trace_path) {
  std::cout << "1. profile: bert tiny (2 encoder layers, hidden 128, seq 128) on the CPU"
            << (precision != core::Precision::Fp32 ? ", in " + std::string(core::precision_name(precision)) : std::string()) << "\n";
  models::Model model = models::build_zoo_model("bert", {{"preset", "tiny"}}, 0);
  profiler::ProfileOptions profile_options;
  // Up to the global batch, so whatever micro-batch the plan picks has a measured time.
  profile_options.batch_sizes = {1, 2, 4, 8, 16, 32};
  profile_options.precision = precision;
  const core::Trace trace = profiler::profile(model, profile_options);
  core::write_trace_file(trace_path, trace);
  std::cout << "   " << trace.layers.size() << " layers, " << core::format_bytes(trace.param_bytes())
            << " of parameters; trace in " << trace_path << "\n\n";
  return trace;
}

// The whole batch run once under the demo's budget, to show what the budget refuses.
void run_whole_batch(const core::Trace& trace, const planner::PlanRequest& request, const planner::StepPrediction& whole) {
  const std::int64_t batch = kDemoBatch;
  core::Plan whole_plan;
  whole_plan.trace_path = request.trace_path;
  whole_plan.trace_sha256 = request.trace_sha256;
  whole_plan.model = trace.model.name;
  whole_plan.device = "cpu";
  whole_plan.budget_bytes = request.budget_bytes;
  whole_plan.global_batch = batch;
  whole_plan.precision = trace.precision;
  whole_plan.choice.micro_batches = {batch};
  whole_plan.predicted = {whole.peak_bytes, static_cast<double>(whole.step_ns) / 1e9,
                          static_cast<double>(batch) * 1e9 / static_cast<double>(whole.step_ns)};
  executor::ExecuteOptions attempt;
  attempt.steps = 1;
  attempt.warmup_steps = 0;
  attempt.gradient_check = false;
  const core::Report refused = executor::execute(whole_plan, trace, "(whole batch)", attempt);
  if (refused.out_of_memory) {
    std::cout << "   the whole batch under this budget: " << report::describe_out_of_memory(*refused.out_of_memory) << "\n\n";
  } else {
    std::cout << "   the whole batch under this budget ran (measured peak " << core::format_bytes(refused.measured.peak_bytes)
              << "): the budget did not bind\n\n";
  }
}

// Step 2: the demo's budget, and the whole batch run under it.
planner::PlanRequest demo_budget(const core::Trace& trace, const std::string& trace_path) {
  const std::int64_t batch = kDemoBatch;
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  planner::PlanRequest request;
  request.global_batch = batch;
  request.trace_path = trace_path;
  request.trace_sha256 = core::sha256_hex(core::read_file(trace_path));
  request.budget_bytes = 1;
  const std::int64_t least = planner::plan_step(trace, request).smallest_budget;
  const auto whole = planner::predict_step(costs, graph, core::StepChoice{}.with_micro_batches({batch}));
  // Well below what the whole batch needs, comfortably above the least any plan needs.
  request.budget_bytes = (least + (whole.peak_bytes - least) * 3 / 10) / (1 << 20) * (1 << 20);
  std::cout << "2. budget: " << core::format_bytes(request.budget_bytes) << " for a batch of " << batch
            << "; the whole batch needs " << core::format_bytes(whole.peak_bytes) << "\n";
  run_whole_batch(trace, request, whole);
  return request;
}

// Step 4: the plan executed under its budget, the report written beside it and printed.
core::Report execute_demo_plan(const core::Plan& plan, const core::Trace& trace, const std::string& plan_path,
                               const std::string& directory) {
  std::cout << "4. execute the plan under the budget\n";
  executor::ExecuteOptions options;
  // At least two seconds as predicted: the median of a fraction of a second's steps is decided by
  // one stall of a shared machine (docs/design.md, "Time on the machine at hand"), and the table
  // compares it with the prediction.
  const double predicted_step = plan.predicted.step_seconds;
  options.steps = predicted_step > 0 ? std::clamp(static_cast<int>(std::ceil(2.0 / predicted_step)), 5, 200) : 5;
  ExecuteProgress progress;
  options.on_progress = std::ref(progress);
  const core::Report executed = executor::execute(plan, trace, plan_path, options);
  progress.end();
  core::write_report_file(directory + "/report.json", executed);
  std::cout << report::render_report(executed);
  return executed;
}

}  // namespace

int run_demo(const DemoArgs& args) {
  const core::Precision precision = core::parse_precision(args.precision, "--precision");
  const std::string directory = demo_directory(args);
  const auto start = std::chrono::steady_clock::now();

  const std::string trace_path = directory + "/trace.json";
  const core::Trace trace = profile_demo_model(precision, trace_path);
  const planner::PlanRequest request = demo_budget(trace, trace_path);

  std::cout << "3. plan\n";
  const auto outcome = planner::plan_for_machine(trace, request, {trace.calibration, "", core::headroom_regime()});
  if (!outcome.plan) {
    std::cerr << "headroom: infeasible: " << outcome.reason << "\n";
    return 3;
  }
  const std::string plan_path = directory + "/plan.json";
  core::write_plan_file(plan_path, *outcome.plan);
  std::cout << report::render_plan_summary(*outcome.plan) << "\n";

  const core::Report executed = execute_demo_plan(*outcome.plan, trace, plan_path, directory);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char took[32];
  std::snprintf(took, sizeof took, "%.1f", seconds);
  std::cout << "\nfiles in " << directory << " (trace.json, plan.json, report.json); demo took " << took << " s\n";
  return executed.status == "ok" ? 0 : 1;
}

}  // namespace headroom::cli
