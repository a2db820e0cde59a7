// The `headroom` command. It runs plan, simulate and compare itself, torch-free, and hands the
// commands that run torch work to headroom-torch (cli/command_line.h). Exit codes: 0 ok, 1 runtime
// failure, 2 bad input or usage, 3 infeasible, 4 a comparison over its thresholds.
#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>

#include "cli/calibration_child.h"
#include "cli/command_line.h"
#include "cli/compare_commands.h"
#include "cli/plan_commands.h"
#include "core/host_memory.h"

using namespace headroom;

namespace {

CLI::App* add_plan_command(CLI::App& app, cli::PlanArgs& args) {
  CLI::App* plan = app.add_subcommand("plan", "choose the fastest way to run a step under a memory budget");
  plan->add_option("trace", args.trace, "trace from headroom profile")->required();
  plan->add_option("--budget", args.budget, "memory budget, e.g. 512MiB, 1.5GiB or plain bytes")->required();
  plan->add_option("--batch", args.batch, "global batch size")->required();
  plan->add_option("--strategies", args.strategies, cli::strategies_help());
  plan->add_option("--margin", args.margin, "safety margin as a fraction of the budget (default 0.05)");
  plan->add_option("--optimizer", args.optimizer,
                   "plan for this optimizer, sgd, adam or adamw (default: the trace's); another one's state is "
                   "estimated, not measured");
  plan->add_option("--momentum", args.momentum, "with --optimizer sgd: its momentum (default 0.9; 0 keeps no buffer)");
  plan->add_flag("--amsgrad", args.amsgrad, "with --optimizer adam or adamw: amsgrad (a third buffer per parameter)");
  plan->add_option("--devices", args.devices,
                   "data-parallel workers sharing the global batch, each under the budget (default 1)");
  plan->add_option("--link", args.link,
                   "the workers' link as BANDWIDTH,LATENCY, e.g. 25GB/s,5us (default: the trace's, from profile --measure-link)");
  plan->add_option("--bucket-cap", args.bucket_cap, "gradients are all-reduced in buckets of at least this size (default 25MiB)");
  plan->add_option("--shard", args.shard,
                   "with --devices: ZeRO's stage, 0 (every worker holds the whole training state), 1 (the optimizer "
                   "state sharded), 2 (the gradients too), 3 (the parameters too) or auto (default: the fastest that fits)")
      ->check([](const std::string& text) { return text.empty() ? std::string("expected 0, 1, 2, 3 or auto") : std::string(); });
  plan->add_option("--gather", args.gather,
                   "with --devices, at stage 3: what a worker gathers at a time, block (a block's parameters "
                   "together, as FSDP), layer (each layer's, as DeepSpeed) or auto (default: the faster that fits)")
      ->check([](const std::string& text) { return text.empty() ? std::string("expected block, layer or auto") : std::string(); });
  plan->add_flag("--no-rescale", args.no_rescale,
                 "keep the trace's times where this machine runs the calibration's kernels at another speed");
  plan->add_option("--precision", args.precision,
                   "plan the step in this one of the precisions the trace measured (default: the trace's own; "
                   "a trace of several prints each one's plan beside the chosen)")
      ->check([](const std::string& text) { return text.empty() ? std::string("expected a precision, e.g. bf16") : std::string(); });
  plan->add_option("-o,--output", args.output, "plan file to write")->required();
  return plan;
}

CLI::App* add_simulate_command(CLI::App& app, cli::SimulateArgs& args) {
  CLI::App* simulate = app.add_subcommand("simulate", "run a plan through the discrete-event simulator");
  simulate->add_option("plan", args.plan, "plan from headroom plan")->required();
  simulate->add_option("-o,--output", args.output, "simulation result to write (JSON)");
  simulate->add_option("--chrome", args.chrome, "timeline as a Chrome trace (opens in Perfetto)");
  simulate->add_flag("--no-rescale", args.no_rescale, "simulate with the trace's times, not the plan's machine's");
  return simulate;
}

CLI::App* add_compare_command(CLI::App& app, cli::CompareArgs& args) {
  CLI::App* compare = app.add_subcommand(
      "compare", "what changed between two traces, plans or reports (memory per layer and sample, time, what fits), with CI thresholds");
  compare->add_option("base", args.base, "BASE: a trace, plan or report")->required();
  compare->add_option("new", args.next, "NEW: the same kind of file")->required();
  compare->add_option("--budget", args.budget,
                      "traces: plan both under this budget (default: BASE's step peak at the largest common batch)");
  compare->add_option("--batch", args.batch, "traces: plan both at this global batch (default: the largest common batch)");
  compare->add_option("--max-memory-growth", args.max_memory_growth,
                      "exit 4 when a layer's or the model's memory per sample grows more than this (default 1%)");
  compare->add_option("--max-slowdown", args.max_slowdown,
                      "exit 4 when the step time per sample grows more than this, e.g. 10% (default: not checked; CPU "
                      "timing is noisy)");
  compare->add_option("--format", args.format, "text (default) or markdown, for a pull-request comment");
  compare->add_option("-o,--output", args.output, "also write the comparison as JSON (schema headroom.compare/1)");
  return compare;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && cli::is_torch_command(argv[1])) {
    if (cli::handed_on_already()) {
      std::cerr << "headroom: " << cli::torch_executable().string() << " is not headroom-torch (it started headroom again)\n";
      return cli::kExitFailure;
    }
    return cli::run_torch_command(argv);
  }

  CLI::App app{"headroom: plan and run neural-network training beyond the memory limit"};
  app.require_subcommand(1);
  app.set_version_flag("--version", HEADROOM_VERSION);

  // Listed by --help among the others; never parsed here.
  cli::add_torch_command(app, "models");
  cli::add_torch_command(app, "profile");

  cli::PlanArgs plan_args;
  CLI::App* plan = add_plan_command(app, plan_args);

  cli::SimulateArgs simulate_args;
  CLI::App* simulate = add_simulate_command(app, simulate_args);

  cli::add_torch_command(app, "execute");
  cli::add_torch_command(app, "calibrate");

  cli::CompareArgs compare_args;
  add_compare_command(app, compare_args);

  cli::add_torch_command(app, "demo");

  if (const std::optional<int> done = cli::parse_command_line(app, argc, argv)) return *done;
  return cli::run_reporting_errors([&] {
    for (const CLI::App* command : app.get_subcommands()) cli::check_outputs(*command);
    core::enter_host_memory_regime();
    if (app.got_subcommand(plan)) {
      plan_args.calibrate_here = cli::calibration_from_child;
      return cli::run_plan(plan_args);
    }
    if (app.got_subcommand(simulate)) {
      simulate_args.calibrate_here = cli::calibration_from_child;
      return cli::run_simulate(simulate_args);
    }
    return cli::run_compare(compare_args);
  });
}
