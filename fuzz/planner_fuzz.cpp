// libFuzzer target: a trace the reader accepts, planned and simulated as `headroom plan` and
// `headroom simulate` do. The input is 4 bytes of request, then the trace's JSON:
//   byte 0-1  budget, as a fraction (0 to 4x, little-endian /16384) of the trace's largest measured
//             step scaled to the global batch, so budgets land near the interesting ones
//   byte 2    global batch, 1 to 64 (bounded so one input plans in milliseconds)
//   byte 3    bits 0-2 strategies (mbp, checkpoint, tempo); bits 3-4 margin (0, 0.05, 0.2, 0.5);
//             bits 5-6 optimizer ("" = the trace's, sgd, adam, "")
// Besides crashes and exceptions other than InputError, a finding is a plan that breaks what the
// planner promises: it fits its budget after the margin, it reads back from its file, the simulator
// reaches its predicted peak, and when nothing fits, the smallest budget it names does fit.
#include <algorithm>
#include <optional>

#include "core/json_reader.h"
#include "core/plan.h"
#include "core/trace.h"
#include "fuzz/fuzz_support.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"
#include "simulator/simulator.h"

using namespace headroom;

namespace {

constexpr std::size_t kRequestBytes = 4;

planner::PlanRequest request_from(const std::uint8_t* bytes, const core::Trace& trace) {
  planner::PlanRequest request;
  request.global_batch = 1 + bytes[2] % 64;
  request.strategies.clear();
  if (bytes[3] & 1) request.strategies.insert(planner::Strategy::MicroBatching);
  if (bytes[3] & 2) request.strategies.insert(planner::Strategy::Checkpointing);
  if (bytes[3] & 4) request.strategies.insert(planner::Strategy::Tempo);
  constexpr double kMargins[] = {0.0, 0.05, 0.2, 0.5};
  request.margin_fraction = kMargins[(bytes[3] >> 3) & 3];
  constexpr const char* kOptimizers[] = {"", "sgd", "adam", ""};
  request.optimizer = kOptimizers[(bytes[3] >> 5) & 3];
  // The largest measured step, its activations scaled to the global batch.
  const core::StepSample& step = trace.steps.back();
  const double activations = std::max(0.0, static_cast<double>(step.peak_bytes) - static_cast<double>(step.static_bytes));
  const double reference = static_cast<double>(step.static_bytes) +
                           activations * static_cast<double>(request.global_batch) / static_cast<double>(step.batch);
  const double fraction = static_cast<double>(bytes[0] | (bytes[1] << 8)) / 16384.0;
  request.budget_bytes = static_cast<std::int64_t>(std::clamp(reference * fraction, 1.0, 0x1p62));
  request.trace_path = "fuzz.json";
  request.trace_sha256 = std::string(64, '0');
  return request;
}

void check_plan(const core::Trace& trace, const planner::PlanRequest& request, const core::Plan& plan) {
  if (plan.predicted.peak_bytes > plan.budget_bytes - plan.margin_bytes) fuzz::finding("the plan does not fit its budget");
  std::int64_t samples = 0;
  for (const auto b : plan.choice.micro_batches) samples += b;
  if (samples != request.global_batch) fuzz::finding("the plan's micro-batches do not sum to the global batch");
  fuzz::must_succeed("simulating the written plan", [&] {
    const core::Plan read = core::plan_from_json(core::parse_json(core::to_json(plan).dump(1), "plan.json"), "plan.json");
    if (read != plan) fuzz::finding("the written plan reads back different");
    const auto schedule = planner::plan_schedule(trace, read, "plan.json");
    const auto sim = simulator::simulate(schedule);
    if (sim.peak_bytes != plan.predicted.peak_bytes) {
      std::fprintf(stderr, "simulated peak %lld at task %d, predicted %lld (%s), micro-batches %zu of %lld\n",
                   static_cast<long long>(sim.peak_bytes), sim.peak_task, static_cast<long long>(plan.predicted.peak_bytes),
                   plan.peak_at.c_str(), plan.choice.micro_batches.size(), static_cast<long long>(plan.choice.micro_batches.front()));
      fuzz::finding("the simulated peak differs from the predicted one");
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kRequestBytes) return 0;
  std::optional<core::Trace> trace;
  const auto text = fuzz::as_text(data + kRequestBytes, size - kRequestBytes);
  if (!fuzz::accepts([&] { trace = core::trace_from_json(core::parse_json(text, "fuzz.json"), "fuzz.json"); })) return 0;
  const planner::PlanRequest request = request_from(data, *trace);
  std::optional<planner::PlanOutcome> outcome;
  // The planner may still reject a trace the reader accepts (a block that is not contiguous).
  if (!fuzz::accepts([&] { outcome = planner::plan_step(*trace, request); })) return 0;
  if (outcome->plan) {
    check_plan(*trace, request, *outcome->plan);
    return 0;
  }
  // Nothing fits: the smallest budget the planner names must (it names none past what a plan may hold).
  if (outcome->smallest_budget == 0) {
    if (outcome->reason.find("a plan may hold") == std::string::npos) fuzz::finding("infeasible without a smallest budget or why");
    return 0;
  }
  planner::PlanRequest enough = request;
  enough.budget_bytes = outcome->smallest_budget;
  fuzz::must_succeed("planning with the smallest budget named", [&] {
    const auto again = planner::plan_step(*trace, enough);
    if (!again.plan) fuzz::finding("the smallest budget the planner names does not fit");
    check_plan(*trace, enough, *again.plan);
  });
  return 0;
}
