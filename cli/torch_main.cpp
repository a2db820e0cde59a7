// headroom-torch: the commands of `headroom` that run torch work (cli/command_line.h), which
// `headroom` starts with the same arguments. Exit codes: 0 ok, 1 runtime failure, 2 bad input or
// usage, 3 infeasible.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <cctype>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "cli/command_line.h"
#include "cli/execute_commands.h"
#include "cli/profile_command.h"
#include "core/atomic_file.h"
#include "core/chrome_trace.h"
#include "core/errors.h"
#include "core/host_memory.h"
#include "core/trace.h"
#include "executor/data_parallel.h"
#include "models/model_source.h"
#include "models/torchscript_model.h"
#include "models/zoo.h"
#include "profiler/profiler.h"
#include "report/trace_report.h"
#include "runtime/calibration.h"
#include "runtime/host_info.h"
#include "runtime/intra_op_threads.h"

namespace {

using namespace headroom;
using cli::ProfileArgs;

void print_models() {
  for (const auto& entry : models::zoo()) {
    std::cout << entry.name << "  " << entry.description << "\n";
    for (const auto& key : entry.keys) {
      std::string value = key.default_value.empty() ? "(from preset)" : key.default_value;
      std::printf("    %-10s %-14s %s\n", key.name.c_str(), value.c_str(), key.help.c_str());
    }
    if (!entry.presets.empty()) {
      std::cout << "    presets:";
      for (const auto& preset : entry.presets) {
        std::cout << " " << preset.name << "(";
        bool first = true;
        for (const auto& [k, v] : preset.values) {
          std::cout << (first ? "" : ",") << k << "=" << v;
          first = false;
        }
        std::cout << ")";
      }
      std::cout << "\n";
    }
    std::cout << "\n";
  }
}

void add_profile_options(CLI::App& command, ProfileArgs& args) {
  for (const auto b : args.options.batch_sizes) args.batch_sizes += (args.batch_sizes.empty() ? "" : ",") + std::to_string(b);
  command.add_option("--set", args.settings, "model size setting key=value (see `headroom models`)");
  command.add_option("--device", args.options.device, "device to profile on")->check(CLI::IsMember({"cpu", "cuda"}));
  command.add_option("--batch-sizes", args.batch_sizes, "micro-batch sizes to sample, ascending, e.g. 1,2,4,8");
  command.add_option("--optimizer", args.options.optimizer,
                     "optimizer whose state and step are measured: sgd, adam or adamw (default adam)");
  command.add_option("--momentum", args.momentum,
                     "with --optimizer sgd: its momentum (default 0.9); 0 keeps no momentum buffer, as torch.optim.SGD's default");
  command.add_flag("--amsgrad", args.amsgrad, "with --optimizer adam or adamw: amsgrad, a third buffer per parameter");
  command.add_option("--freeze", args.freeze,
                     "parameters not to train, comma-separated glob patterns on their paths or their submodules' "
                     "(layer4.0.conv1.weight, layer4, stage0.*); a pattern starting with ! trains again, so *,!fc "
                     "trains fc alone; frozen parameters keep no gradient or optimizer state");
  command.add_option("--warmup", args.options.warmup_steps, "unmeasured steps per batch size");
  command.add_option("--repeats", args.options.repeats, "measured steps per batch size (medians are kept)");
  command.add_option("--timing-seconds", args.timing_seconds,
                     "once every size is profiled, seconds of rounds that time each size's step again, so that every "
                     "size's time is the machine's over all of them (default 2, with --add-to the trace's; 0: none; "
                     "on a shared machine whose speed wanders, 10 gives steadier predictions)");
  command.add_option("--seed", args.options.seed, "seed for parameters and batches");
  command.add_option("--threads", args.options.threads,
                     "intra-op CPU threads (default: the cores this process may use that other processes do not keep busy; execute runs the step at the same)");
  command.add_option("--precision", args.precision,
                     "the precision the step runs in, or several comma-separated, each profiled into the one trace "
                     "(plan --precision picks one): fp32 (the default); bf16-autocast (forward and loss under "
                     "autocast to bfloat16, backward outside; parameters, gradients and optimizer state in float32); "
                     "bf16 (parameters, activations and gradients in bfloat16, the loss in float32, the optimizer "
                     "updating float32 master weights); the trace and its plans hold for it alone");
  command.add_flag("!--no-tempo", args.options.tempo,
                   "skip the second pass that measures Tempo's memory-lean layers (bert, gpt); plans then cannot use tempo");
  command.add_option("--locate-steps", args.locate_steps,
                     "where a layer's scratch memory may step between two of the sizes by more than 0.5% of the step, "
                     "profile up to this many sizes more, halving that span, so plans there are exact rather than "
                     "bounded by the step (default 6; 0: none; not with --add-to)");
}

CLI::App* add_profile_command(CLI::App& app, ProfileArgs& args) {
  CLI::App* profile = cli::add_torch_command(app, "profile");
  profile->add_option("--model", args.model, "zoo model name (or --torchscript)");
  profile->add_option("--torchscript", args.torchscript,
                      "your own model: a TorchScript file (torch.jit.script of any nn.Module), cut into layers at its "
                      "submodule calls");
  profile->add_option("--input", args.inputs,
                      "with --torchscript: one sample's input as SHAPE:DTYPE, e.g. 3x224x224:float32 or 128:int64:0-50257; "
                      "repeated for a forward that takes several, in its order (token ids, then a mask)")
      ->take_all();
  profile->add_option("--target", args.target,
                      "with --torchscript: one sample's target as SHAPE:DTYPE (default: from the output and the loss)");
  profile->add_option("--loss", args.loss,
                      "with --torchscript: cross-entropy (the default; classes along dimension 1 as PyTorch's "
                      "cross_entropy takes them: [N, C] or [N, C, H, W] against [N] or [N, H, W]), cross-entropy-last "
                      "(classes along the last dimension: a language model's [N, T, V] against [N, T]), mse, or model "
                      "(the module returns the loss)")
      ->check(CLI::IsMember({"cross-entropy", "cross-entropy-last", "mse", "model"}));
  profile->add_option("--layers", args.layers,
                      "with --torchscript: the submodules that are layers, by dotted path, e.g. conv1,layer1,layer2.0,fc; "
                      "the code between them runs with the next of them");
  profile->add_option("--depth", args.depth,
                      "with --torchscript, instead of --layers: the submodules this deep that forward calls are the "
                      "layers (1: its children; default: the shallowest depth with 8 layers that hold parameters)");
  profile->add_option("--output-index", args.output_index,
                      "with --torchscript, where forward returns a tuple (logits and more): the element the loss reads, "
                      "from 0");
  add_profile_options(*profile, args);
  profile->add_option("-o,--output", args.output, "trace file to write")->required();
  profile->add_option("--add-to", args.add_to,
                      "a trace of the same model and options to add these batch sizes to (sizes a plan chose between "
                      "the profiled ones); -o gets that trace with them");
  profile->add_flag("--measure-link", args.measure_link,
                    "also measure this host's loopback all-reduce (bandwidth, latency) for data-parallel plans");
  profile->add_option("--chrome", args.chrome,
                      "also write the largest batch's profiled step as a Chrome trace (opens in Perfetto); on CUDA with a lane per GPU stream");
  return profile;
}

CLI::App* add_execute_command(CLI::App& app, cli::ExecuteArgs& args) {
  CLI::App* execute = cli::add_torch_command(app, "execute");
  execute->add_option("plan", args.plan, "plan from headroom plan")->required();
  execute->add_option("--steps", args.steps, "measured steps (after warm-up)");
  execute->add_option("--warmup", args.warmup, "unmeasured steps first");
  execute->add_option("--device", args.device, "device to run on")->check(CLI::IsMember({"cpu", "cuda"}));
  auto* no_budget = execute->add_flag("--no-budget", args.no_budget, "do not enforce the plan's budget on the CPU");
  execute->add_flag("--host-limit", args.host_limit,
                    "the budget is this host's memory limit: keep malloc's resident heap (free pages the host-memory "
                    "regime keeps for speed) within it too, handing free heap back after a step (slower)")
      ->excludes(no_budget);
  execute->add_option("--data", args.data, "synthetic, or fashion-mnist for the cnn model (reports test accuracy)")
      ->check(CLI::IsMember({"synthetic", "fashion-mnist"}));
  execute->add_flag("--batchnorm-eval", args.batchnorm_eval,
                    "BatchNorm normalizes with running statistics, so micro-batches train exactly like the full batch");
  execute->add_option("--devices", args.devices,
                      "run a data-parallel plan on this many local worker processes (Gloo over loopback; NCCL on CUDA)");
  execute->add_option("--rank", args.rank, "run as this worker of a data-parallel group launched by hand");
  execute->add_option("--world-size", args.world_size, "with --rank: how many workers the group has");
  execute->add_option("--store", args.store,
                      "with --rank: where the workers meet: file:PATH (a shared file) or tcp:HOST:PORT (served by rank 0)");
  execute->add_flag("--full-batch-reference", args.full_batch_reference,
                    "train with dropout off, then run the same steps in one process on each step's full batch and "
                    "report how far the weights are apart");
  execute->add_option("--threads", args.threads,
                      "intra-op CPU threads (default: the plan's, as the trace was profiled; more than this process may use is refused)")
      ->check(CLI::Range(1, 4096));
  execute->add_flag("--no-rescale", args.no_rescale,
                    "keep the plan's predicted times where this machine runs the calibration's kernels at another speed");
  execute->add_option("-o,--output", args.output, "report file to write");
  return execute;
}

struct CalibrateArgs {
  std::string device = "cpu";
  int threads = 0;
  std::string output;
};

CLI::App* add_calibrate_command(CLI::App& app, CalibrateArgs& args) {
  CLI::App* calibrate = cli::add_torch_command(app, "calibrate");
  calibrate->add_option("--device", args.device, "device to time")->check(CLI::IsMember({"cpu", "cuda"}));
  calibrate->add_option("--threads", args.threads, "intra-op CPU threads (default: the cores this process may use)")
      ->check(CLI::Range(1, 4096));
  calibrate->add_option("-o,--output", args.output, "also write it as JSON");
  return calibrate;
}

CLI::App* add_demo_command(CLI::App& app, cli::DemoArgs& args) {
  CLI::App* demo = cli::add_torch_command(app, "demo");
  demo->add_option("--dir", args.directory, "where to keep the trace, plan and report (default: a new temporary directory)");
  demo->add_option("--precision", args.precision, "the precision the step runs in: fp32 (the default), bf16-autocast or bf16");
  return demo;
}

int run_calibrate(const CalibrateArgs& args) {
  if (args.device == "cuda" && !torch::cuda::is_available()) {
    throw core::InputError("--device cuda: this libtorch sees no CUDA device");
  }
  runtime::use_threads(args.threads > 0 ? args.threads : runtime::usable_cores());
  // Kept for the commands that follow (cli/calibration_child.h), which compare traces with it for
  // an hour: not a CPU timed while other processes shared it, whose slower kernels would rescale
  // every trace planned after it (docs/design.md, "Time on the machine at hand").
  const runtime::KeptCalibration timed =
      runtime::calibrate_and_keep(args.device == "cuda" ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU));
  const core::Calibration& c = timed.calibration;
  std::cout << c.device << ": " << report::describe_calibration(c) << "\n";
  if (!timed.shared.empty()) {
    std::cerr << "warning: " << timed.shared << " while calibrating: this timing is not kept as the machine's speed for "
              << "the commands that follow; calibrate again on a quiet machine\n";
  }
  if (!args.output.empty()) core::write_file_atomically(args.output, core::to_json(c).dump(2) + "\n");
  return 0;
}

// Profiles as `profile` asked (cli::run_profile), measures the link if asked, writes the trace and
// the Chrome timeline together and prints the summary.
void profile_and_write(const ProfileArgs& args) {
  cli::check_model_flags(args);
  std::optional<profiler::GpuStepRecord> gpu_step;
  core::Trace trace = cli::run_profile(args, gpu_step);
  if (args.measure_link) {
    std::cerr << "measuring the loopback link (Gloo collectives between and beside compute, 2 workers)\n";
    trace.link = executor::measure_loopback_link();
    // The machine's link, whichever precision a plan picks.
    for (auto& other : trace.other_precisions) other.link = trace.link;
    char beside[96];
    std::snprintf(beside, sizeof beside, "; compute beside a collective loses %.0f%% of its time", trace.link->beside_compute * 100);
    std::cerr << "link: " << core::format_link(*trace.link) << beside << "\n";
  }
  std::vector<std::pair<std::filesystem::path, std::string>> outputs;
  if (!args.output.empty()) outputs.emplace_back(args.output, core::to_json(trace).dump(1) + "\n");
  if (!args.chrome.empty()) {
    core::ChromeTrace chrome = core::profile_step_chrome(trace, trace.batch_sizes.back());
    if (gpu_step) {
      std::vector<std::string> names;
      for (const auto& layer : trace.layers) names.push_back(layer.name);
      profiler::gpu::add_gpu_lanes(chrome, gpu_step->log, gpu_step->ranges, names, gpu_step->origin_ns, 2);
    }
    outputs.emplace_back(args.chrome, chrome.to_json().dump() + "\n");
  }
  core::write_files_together(outputs);
  const bool several = !trace.other_precisions.empty();
  std::cout << cli::trace_summary(trace, several);
  for (const auto& other : trace.other_precisions) {
    std::cout << "\n";
    std::cout << cli::trace_summary(other, several);
  }
  if (!args.output.empty()) std::cout << "\ntrace written to " << args.output << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"headroom: plan and run neural-network training beyond the memory limit"};
  app.require_subcommand(1);
  app.set_version_flag("--version", HEADROOM_VERSION);

  cli::add_torch_command(app, "models");

  ProfileArgs profile_args;
  CLI::App* profile = add_profile_command(app, profile_args);

  cli::ExecuteArgs execute_args;
  CLI::App* execute = add_execute_command(app, execute_args);

  CalibrateArgs calibrate_args;
  CLI::App* calibrate = add_calibrate_command(app, calibrate_args);

  cli::DemoArgs demo_args;
  CLI::App* demo = add_demo_command(app, demo_args);

  if (const std::optional<int> done = cli::parse_command_line(app, argc, argv)) return *done;

  // As `headroom` starts it; where it was started by hand, it restarts itself so.
  if (!app.got_subcommand("models")) runtime::run_with_passive_thread_pools(argv);
  return cli::run_reporting_errors([&] {
   try {
    for (const CLI::App* command : app.get_subcommands()) cli::check_outputs(*command);
    // From start-up, so everything the process allocates (the model, a dataset) is in the regime
    // the trace and the report name.
    core::enter_host_memory_regime();
    if (app.got_subcommand("models")) {
      print_models();
    } else if (app.got_subcommand(execute)) {
      return cli::run_execute(execute_args);
    } else if (app.got_subcommand(calibrate)) {
      return run_calibrate(calibrate_args);
    } else if (app.got_subcommand(demo)) {
      return cli::run_demo(demo_args);
    } else if (app.got_subcommand(profile)) {
      profile_and_write(profile_args);
    }
    return cli::kExitOk;
   } catch (const c10::Error& e) {
    // libtorch's messages carry a backtrace; its first line is the message.
    const std::string message = e.what_without_backtrace();
    throw std::runtime_error(message.substr(0, message.find('\n')));
   }
  });
}
