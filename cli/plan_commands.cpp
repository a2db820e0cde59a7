#include "cli/plan_commands.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/host_memory.h"
#include "core/optimizer_spec.h"
#include "core/plan.h"
#include "core/rescale.h"
#include "core/sha256.h"
#include "core/sharding.h"
#include "core/statistics.h"
#include "core/trace.h"
#include "core/trace_precisions.h"
#include "core/units.h"
#include "planner/l2l_model.h"
#include "planner/plan_for_machine.h"
#include "planner/plan_explanation.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "planner/technique.h"
#include "report/plan_report.h"
#include "runtime/host_info.h"
#include "simulator/simulator.h"

namespace headroom::cli {

std::string strategies_help() {
  std::string help = planner::strategy_names() + " (comma-separated) | all | none (none: the whole batch, nothing applied)";
  for (const auto& entry : planner::strategy_table()) {
    if (entry.implemented) help += "\n  " + std::string(entry.name) + ": " + std::string(entry.summary);
  }
  return help;
}

namespace {

// The trace with its times on this machine, and the line that says where they differ (the plan's
// warnings carry it; an infeasible answer, which times do not decide, stays one line).
core::TimesHere times_on_this_machine(const core::Trace& trace, bool no_rescale,
                                      const std::function<runtime::MachineTiming(const core::Trace&)>& calibrate_here) {
  if (!calibrate_here) return {std::nullopt, trace.calibration, ""};
  const runtime::MachineTiming here = calibrate_here(trace);
  if (!here.calibration && !here.why_not.empty() && trace.calibration) {
    return {std::nullopt, trace.calibration, "this machine could not be timed (" + here.why_not + "): the times are the trace's"};
  }
  return core::times_here(trace, here.calibration, !no_rescale);
}

// Asked for by name, a strategy needs what it measures from the trace ("all" takes each where it can).
void check_named_strategies(const PlanArgs& args, const planner::PlanRequest& request, bool all, const core::Trace& trace) {
  for (const auto id : request.strategies) {
    if (all || planner::applies_to(id, trace)) continue;
    const auto& entry = planner::strategy_entry(id);
    if (id == planner::Strategy::L2L) {
      throw core::InputError(args.trace + ": --strategies l2l: L2L cannot run " + trace.model.name + ": " +
                             planner::l2l_refusal(trace));
    }
    if (id == planner::Strategy::Tempo && !core::tempo_layers_run_in(trace.precision, trace.device.is_cuda())) {
      throw core::InputError(args.trace + ": --strategies tempo: Tempo layers are profiled in " +
                             std::string(core::kTempoLayerPrecisions) + " only, and this trace measured " +
                             std::string(core::precision_name(trace.precision)) +
                             (trace.device.is_cuda() ? " on cuda" : ""));
    }
    throw core::InputError(args.trace + ": --strategies " + std::string(entry.name) + ": the trace has no " +
                           std::string(entry.needs) + "; model " + trace.model.name);
  }
}

// The workers' link (--link, else the trace's) and the gradient buckets (--bucket-cap).
void set_link_and_buckets(const PlanArgs& args, const core::Trace& trace, planner::PlanRequest& request) {
  if (!args.link.empty()) {
    try {
      request.link = core::parse_link(args.link);
    } catch (const core::InputError& e) {
      throw core::InputError(std::string("--link: ") + e.what());
    }
  } else if (trace.link) {
    request.link = *trace.link;
  }
  if (!args.bucket_cap.empty()) {
    try {
      request.bucket_cap_bytes = core::parse_bytes(args.bucket_cap);
    } catch (const core::InputError& e) {
      throw core::InputError(std::string("--bucket-cap: ") + e.what());
    }
    if (request.bucket_cap_bytes < 1 || request.bucket_cap_bytes > core::kMaxPlanBudget) {
      throw core::InputError("--bucket-cap: expected from 1 B to 16 TiB, got " + args.bucket_cap);
    }
  }
}

// Where a shard stage's collectives are in worker 0's simulated timeline.
const char* collectives_in_timeline(const core::DataParallelChoice& dp) {
  const int shard_stage = dp.shard_stage;
  if (shard_stage >= 3 && dp.gather == core::GatherUnit::Block) {
    return "each block's gathers (a layer's outside blocks) on the collective lane, each but a micro-batch's first "
           "started with the gathering layer before (their memory a band of its own), the gradients' reduces there "
           "too, after the backward filling their buffer";
  }
  if (shard_stage >= 3) {
    return "each layer's gathers on the collective lane, each but a micro-batch's first started with the layer "
           "before (their memory a band of its own), the gradients' reduces there too, after the backward filling "
           "their buffer";
  }
  if (shard_stage == 2) {
    return "the gradients' reduces on the collective lane, after the backward filling their buffer, the optimizer "
           "including the parameters' broadcast";
  }
  if (shard_stage == 1) return "the gradients' all-reduce on the collective lane, the optimizer including the parameters' broadcast";
  return "the gradients' all-reduce on the collective lane";
}

// The planner's check of the sharding a request asks for, its refusal named after `flag` ("--shard:
// stage 3 ..." for the planner's "shard_stage: stage 3 ...").
void check_sharding_flag(const std::string& flag, const core::Trace& trace, const planner::PlanRequest& at) {
  try {
    planner::check_shard_stage(trace, at);
  } catch (const core::InputError& e) {
    const std::string message = e.what();
    throw core::InputError(flag + ": " + message.substr(message.find(": ") + 2));
  }
}

// --shard: unset or "auto" leaves the stage to the search; a stage is checked against the trace.
std::optional<int> shard_stage_from_flag(const PlanArgs& args, const core::Trace& trace, const planner::PlanRequest& request) {
  if (args.shard.empty()) return std::nullopt;
  if (args.devices < 2) {
    throw core::InputError("--shard: sharding splits the training state over data-parallel workers; give --devices N "
                           "(N of 2 or more)");
  }
  if (args.shard == "auto") return std::nullopt;
  const bool digit = args.shard.size() == 1 && args.shard[0] >= '0' && args.shard[0] <= '9';
  if (!digit || args.shard[0] - '0' > core::kMaxShardStage) {
    throw core::InputError("--shard: expected 0, 1, 2, 3 or auto, got '" + args.shard + "'");
  }
  planner::PlanRequest at = request;
  at.shard_stage = args.shard[0] - '0';
  check_sharding_flag("--shard", trace, at);
  return at.shard_stage;
}

// --gather: unset or "auto" leaves it to the search (stage 3's); checked against the stage.
std::optional<core::GatherUnit> gather_from_flag(const PlanArgs& args, const core::Trace& trace, const planner::PlanRequest& request) {
  if (args.gather.empty()) return std::nullopt;
  if (args.gather != "block" && args.gather != "layer" && args.gather != "auto") {
    throw core::InputError("--gather: expected block, layer or auto, got '" + args.gather + "'");
  }
  if (args.devices < 2) {
    throw core::InputError("--gather: only stage 3 gathers parameters, over data-parallel workers; give --devices N "
                           "(N of 2 or more)");
  }
  if (args.gather == "auto") return std::nullopt;
  if (request.shard_stage && *request.shard_stage != 3) {
    throw core::InputError("--gather: only stage 3 gathers parameters, and --shard " + args.shard + " keeps them whole");
  }
  planner::PlanRequest at = request;
  at.gather = core::parse_gather_unit(args.gather, "--gather");
  check_sharding_flag("--gather", trace, at);
  return at.gather;
}

// The request the flags make, each checked against the trace (the planning trace: its precision
// asked for first, its times on this machine). `all`: --strategies asks for all.
planner::PlanRequest request_from_flags(const PlanArgs& args, const core::Trace& trace, bool all) {
  planner::PlanRequest request;
  try {
    request.budget_bytes = core::parse_bytes(args.budget);
  } catch (const core::InputError& e) {
    throw core::InputError(std::string("--budget: ") + e.what());
  }
  request.global_batch = args.batch;
  request.margin_fraction = args.margin;
  // "all" leaves out what cannot run with --devices (L2L), as it leaves out what the trace lacks.
  request.strategies = planner::parse_strategies(args.strategies, args.devices);
  check_named_strategies(args, request, all, trace);
  request.trace_path = args.trace;
  request.trace_sha256 = core::sha256_hex(core::read_file(args.trace));
  if (!args.optimizer.empty()) {
    request.optimizer =
        core::optimizer_spec_from_flags(args.optimizer, args.momentum ? &*args.momentum : nullptr, args.amsgrad).text();
  } else if (args.momentum || args.amsgrad) {
    throw core::InputError(std::string(args.momentum ? "--momentum" : "--amsgrad") +
                           ": give the optimizer it sets with --optimizer (the trace's is " + trace.optimizer.name + ")");
  }
  if (args.devices < 1 || args.devices > core::kMaxWorkers) {
    throw core::InputError("--devices: expected from 1 to " + std::to_string(core::kMaxWorkers) + ", got " +
                           std::to_string(args.devices));
  }
  request.workers = args.devices;
  // L2L's host side must fit this machine's memory (or its container's).
  if (request.strategies.contains(planner::Strategy::L2L)) request.host_memory_bytes = core::available_host_memory_bytes();
  set_link_and_buckets(args, trace, request);
  request.shard_stage = shard_stage_from_flag(args, trace, request);
  request.gather = gather_from_flag(args, trace, request);
  if (request.workers > 1 && !request.link.known()) {
    throw core::InputError(args.trace + ": --devices " + std::to_string(args.devices) +
                           ": the trace has no measured link (profile with --measure-link) and no --link was given, "
                           "e.g. --link 25GB/s,5us");
  }
  return request;
}

// No plan fits: why, and where the strategies named leave l2l out, what budget it would need.
Infeasible infeasible(const PlanArgs& args, const core::Trace& trace, const planner::PlanRequest& request,
                      const planner::PlanOutcome& outcome) {
  std::string reason = "infeasible: " + outcome.reason;
  // Strategies named without l2l: say what L2L would need, where it needs less.
  if (const std::int64_t with_l2l = planner::least_budget_with_l2l(trace, request, outcome, core::available_host_memory_bytes());
      with_l2l > 0) {
    reason += "; with l2l as well (--strategies " + args.strategies + ",l2l) it must be at least " +
              core::format_bytes_at_least(with_l2l);
  }
  return Infeasible(reason);
}

// What a technique the plan uses, or one asked for by name, adds (L2L: what else the budget
// trains), and the other precisions' plans.
std::string techniques_and_precisions(const core::Trace& trace, const planner::PlanRequest& request,
                                      const planner::PlanningMachine& machine, bool all, const core::Plan& plan) {
  std::string out;
  for (const planner::Technique* technique : planner::techniques()) {
    const auto strategy = technique->strategy();
    const bool named = !all && strategy && request.strategies.contains(*strategy);
    out += technique->after_summary(trace, plan, request, named);
  }
  if (!trace.other_precisions.empty()) {
    out += "\n" + report::render_precision_comparison(planner::plan_each_precision(trace, request, machine, plan), trace.precision);
    std::string emulated;
    for (const core::Precision p : trace.precisions()) {
      if (trace.device.kind == "cpu" && core::computes_in_bfloat16(p) && !runtime::cpu_has_native_bf16()) {
        emulated += (emulated.empty() ? "" : ", ") + std::string(core::precision_name(p));
      }
    }
    if (!emulated.empty()) {
      out += "  " + emulated + ": this CPU has no native bfloat16 arithmetic; the samples/s above are for a CPU that has it\n";
    }
  }
  return out;
}

// Where the plan is for this CPU and it lacks bfloat16 instructions, its bf16 times (the trace's,
// rescaled by float32 kernels) are not this machine's: said, and `profile` here times the price.
std::optional<std::string> bfloat16_warning(const core::Trace& trace, bool for_this_machine) {
  if (!for_this_machine || trace.device.kind != "cpu" || !core::computes_in_bfloat16(trace.precision) || runtime::cpu_has_native_bf16()) {
    return std::nullopt;
  }
  return "this CPU has no native bfloat16 arithmetic (no avx512_bf16 or amx_bf16): the plan's " +
         std::string(core::precision_name(trace.precision)) + " times hold for a CPU that has it; here its matrix " +
         "products run several times slower (`headroom profile --precision " +
         std::string(core::precision_name(trace.precision)) + "` on this machine says how much, before it starts)";
}

}  // namespace

PlanMade make_plan(const PlanArgs& args) {
  const core::Trace file = core::read_trace_file(args.trace);
  // A trace of several precisions: the one asked for first (its figures are the plan's).
  const core::Trace recorded =
      args.precision.empty()
          ? file
          : core::with_precision_first(file, core::parse_precision(args.precision, "--precision"), "--precision: " + args.trace);
  const core::TimesHere here = times_on_this_machine(recorded, args.no_rescale, args.calibrate_here);
  const core::Trace& trace = here.rescaled ? *here.rescaled : recorded;
  const bool all = planner::asks_for_all(args.strategies);
  const planner::PlanRequest request = request_from_flags(args, trace, all);
  const planner::PlanningMachine machine{here.calibration, here.note, core::headroom_regime()};
  planner::PlanOutcome outcome = planner::plan_for_machine(trace, request, machine);
  if (!outcome.plan) throw infeasible(args, trace, request, outcome);
  if (const auto warning = bfloat16_warning(trace, args.calibrate_here && !args.no_rescale)) {
    outcome.plan->warnings.push_back(*warning);
  }
  std::string summary = report::render_plan_summary(*outcome.plan);
  if (const auto& dp = outcome.plan->choice.data_parallel; dp && !outcome.shard_stages.empty()) {
    summary += "\n" + report::render_shard_stages(outcome.shard_stages, *dp);
  }
  PlanMade made{std::move(*outcome.plan), std::move(summary), {}};
  // Asked for once the plan is out (written, printed): a precision comparison plans again.
  made.after_summary = [trace = core::Trace(trace), request, machine, all, plan = made.plan] {
    return techniques_and_precisions(trace, request, machine, all, plan);
  };
  return made;
}

int run_plan(const PlanArgs& args) {
  PlanMade made;
  try {
    made = make_plan(args);
  } catch (const Infeasible& e) {
    std::cerr << "headroom: " << e.what() << "\n";
    return kExitInfeasible;
  }
  core::write_plan_file(args.output, made.plan);
  std::cout << made.summary << "\nplan written to " << args.output << "\n" << std::flush;
  std::cout << made.after_summary();
  return 0;
}


namespace {

// simulate's lines on a data-parallel plan's workers: whose step it is, where its collectives are,
// and what its compute loses to them.
void print_workers(const core::Plan& plan) {
  const core::DataParallelChoice& dp = *plan.choice.data_parallel;
  std::printf("workers          %d, %s: worker 0's step; %s\n", dp.workers, core::shard_stage_name(dp.shard_stage).c_str(),
              collectives_in_timeline(dp));
  if (const auto beside = plan.predicted_part(core::kComputeBesideCollectivesSecondsPart)) {
    std::printf("beside compute   %.4f s a step on the compute lane: what the compute loses to the collectives running "
                "beside it (%.0f%% of their overlapped time, as the link was measured)\n",
                *beside, dp.link.beside_compute * 100);
  }
}

}  // namespace

int run_simulate(const SimulateArgs& args) {
  const core::Plan plan = core::read_plan_file(args.plan);
  const core::Trace recorded = core::load_plan_trace(plan, args.plan);
  const core::TimesHere here = times_on_this_machine(recorded, args.no_rescale, args.calibrate_here);
  const core::Trace& trace = here.rescaled ? *here.rescaled : recorded;
  const auto schedule = planner::plan_schedule(trace, plan, args.plan);
  const simulator::Simulation sim = simulator::simulate(schedule);

  std::string peak_at = "start";
  if (sim.peak_task >= 0) {
    const auto& t = schedule.tasks[static_cast<std::size_t>(sim.peak_task)];
    peak_at = t.category + " of " + t.name + (t.micro_batch >= 0 ? " (micro-batch " + std::to_string(t.micro_batch) + ")" : "");
  }
  // Every memory change of the step, but a run of identical micro-batches only once: `repeats`
  // says which rows are a repetition and how often and how long it runs (schema /2; /1 listed
  // every repetition, hundreds of MB at thousands of micro-batches).
  nlohmann::json timeline = nlohmann::json::array();
  for (const auto& s : sim.memory) {
    nlohmann::json row = {{"time_ns", s.time_ns}, {"total_bytes", s.total()}};
    for (std::size_t k = 0; k < core::kMemoryKinds; ++k) row[std::string(core::kMemoryKindNames[k])] = s.bytes[k];
    timeline.push_back(row);
  }
  nlohmann::json repeats = nlohmann::json::array();
  for (std::size_t k = 0; k < sim.repeats.size() && k < schedule.repeats.size(); ++k) {
    const simulator::RepeatTiming& r = sim.repeats[k];
    const core::Task& first = schedule.tasks[static_cast<std::size_t>(schedule.repeats[k].first_task)];
    repeats.push_back({{"first_micro_batch", first.micro_batch},
                       {"micro_batches", r.times},
                       {"tasks_each", schedule.repeats[k].task_count},
                       {"start_ns", r.start_ns},
                       {"repetition_ns", r.period_ns},
                       {"end_ns", r.end_ns},
                       {"peak_bytes", r.peak_bytes},
                       {"memory_timeline_rows", {{"first", r.first_sample}, {"count", r.end_sample - r.first_sample}}}});
  }
  const double step_seconds = static_cast<double>(sim.makespan_ns) / 1e9;
  const std::int64_t tasks = simulator::tasks_run(schedule);
  const nlohmann::json document = {
      {"schema", "headroom.simulation/2"},
      {"plan", args.plan},
      {"tasks", tasks},
      {"simulated_tasks", schedule.tasks.size()},
      {"micro_batches", plan.choice.micro_batches.size()},
      {"simulated", {{"peak_bytes", sim.peak_bytes}, {"step_seconds", step_seconds}, {"samples_per_second", sim.samples_per_second()}}},
      {"planned", {{"peak_bytes", plan.predicted.peak_bytes}, {"step_seconds", plan.predicted.step_seconds},
                   {"samples_per_second", plan.predicted.samples_per_second}}},
      {"peak_at", peak_at},
      {"memory_timeline", timeline},
      {"repeats", repeats},
  };
  std::vector<std::pair<std::filesystem::path, std::string>> outputs;
  if (!args.output.empty()) outputs.emplace_back(args.output, document.dump(1) + "\n");
  if (!args.chrome.empty()) {
    outputs.emplace_back(args.chrome, simulator::chrome_trace(schedule, sim, plan.model + " plan " + args.plan).dump() + "\n");
  }
  core::write_files_together(outputs);

  std::printf("simulated %lld tasks of %s (%zu micro-batches", static_cast<long long>(tasks), args.plan.c_str(),
              plan.choice.micro_batches.size());
  if (static_cast<std::int64_t>(schedule.tasks.size()) < tasks) {
    std::printf("; %zu tasks simulated, a run of identical micro-batches once", schedule.tasks.size());
  }
  std::printf(")\n\n");
  if (!here.note.empty()) std::printf("note: %s\n\n", here.note.c_str());
  std::printf("                 planned        simulated      difference\n");
  std::printf("peak             %-14s %-14s %+.3f%%\n", core::format_bytes(plan.predicted.peak_bytes).c_str(),
              core::format_bytes(sim.peak_bytes).c_str(),
              100 * core::relative_error(static_cast<double>(sim.peak_bytes), static_cast<double>(plan.predicted.peak_bytes)));
  std::printf("step             %-14.4f %-14.4f %+.3f%%\n", plan.predicted.step_seconds, step_seconds,
              100 * core::relative_error(step_seconds, plan.predicted.step_seconds));
  std::printf("samples/s        %-14.2f %-14.2f\n", plan.predicted.samples_per_second, sim.samples_per_second());
  std::printf("peak at          %s\n", peak_at.c_str());
  if (plan.choice.data_parallel) print_workers(plan);
  return 0;
}

}  // namespace headroom::cli
