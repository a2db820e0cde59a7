// The step's precision: bf16 autocast as PyTorch runs it (forward and loss inside the region,
// backward outside), recorded in the trace and the plan, refused where they disagree, and a plan
// under it predicted at or above what runs and within 1% of it.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/plan.h"
#include "core/sha256.h"
#include "executor/executor.h"
#include "executor/plan_runner.h"
#include "models/zoo.h"
#include "planner/plan_search.h"
#include "profiler/profiler.h"
#include "report/comparison.h"
#include "report/plan_report.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

const std::map<std::string, std::string> kMlp = {{"input", "64"}, {"hidden", "256"}, {"depth", "3"}};
const std::map<std::string, std::string> kBertTiny = {
    {"preset", "tiny"}, {"hidden", "64"}, {"heads", "2"}, {"seq", "32"}, {"vocab", "128"}};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// Inside a layer's forward the matrix products run in bfloat16; the gradients, made in backward
// outside the region, are float32 as the parameters are; and autocast is off again afterwards.
TEST(Precision, Bf16AutocastRunsTheForwardInBfloat16AndTheBackwardOutside) {
  models::Model model = models::build_zoo_model("mlp", kMlp, 1);
  model.set_training(true);
  model.set_precision(core::Precision::Bf16Autocast);
  const models::Batch batch = model.make_batch(8, 2);
  const torch::Tensor hidden = model.forward_to(batch, 0);
  EXPECT_EQ(hidden.scalar_type(), torch::kBFloat16) << model.layers()[0].name;
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  const torch::Tensor loss = model.forward(batch);
  EXPECT_EQ(loss.scalar_type(), torch::kFloat32);  // the loss autocast keeps in float32
  loss.backward();
  for (const auto& p : model.parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32);
  }
  // Against the float32 step from the same weights and data: close, not equal (bfloat16 keeps 8 bits).
  std::vector<torch::Tensor> bf16_grads = executor::gradients_of(model.parameters());
  for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  model.set_precision(core::Precision::Fp32);
  model.forward(batch).backward();
  const double difference = executor::max_relative_difference(bf16_grads, executor::gradients_of(model.parameters()));
  EXPECT_GT(difference, 0);
  EXPECT_LT(difference, 0.1);
}

// Profiled under bf16 autocast, the trace says so and its plan does; the plan runs under it with the
// peak predicted at or above what runs and within 1% of it, and a plan of another precision than its
// trace is refused.
TEST(Precision, Bf16AutocastIsProfiledPlannedAndExecutedWithinOnePercent) {
  for (const auto& [name, config] : {std::pair{std::string("mlp"), kMlp}, {std::string("bert"), kBertTiny}}) {
    models::Model model = models::build_zoo_model(name, config, 0);
    profiler::ProfileOptions options;
    options.batch_sizes = {1, 2, 4, 8, 16};
    options.repeats = 1;
    options.precision = core::Precision::Bf16Autocast;
    const core::Trace trace = profiler::profile(model, options);
    EXPECT_EQ(trace.precision, core::Precision::Bf16Autocast);
    EXPECT_FALSE(trace.has_tempo()) << "Tempo's lean layers are float32's";
    EXPECT_EQ(core::trace_from_json(core::to_json(trace)).precision, core::Precision::Bf16Autocast);

    planner::PlanRequest request;
    request.global_batch = 32;
    request.budget_bytes = std::int64_t{1} << 40;
    request.strategies = {};
    const auto whole = planner::plan_step(trace, request);
    ASSERT_TRUE(whole.plan);
    request.strategies = {core::Strategy::MicroBatching, core::Strategy::Checkpointing};
    // 60% of the whole batch's need, or where that is below the training state, the least budget.
    request.budget_bytes = whole.plan->predicted.peak_bytes * 6 / 10;
    auto outcome = planner::plan_step(trace, request);
    if (!outcome.plan && outcome.smallest_budget > 0) {
      request.budget_bytes = outcome.smallest_budget * 21 / 20;
      outcome = planner::plan_step(trace, request);
    }
    ASSERT_TRUE(outcome.plan) << name << ": " << outcome.reason;
    EXPECT_EQ(outcome.plan->precision, core::Precision::Bf16Autocast);
    EXPECT_NE(report::render_plan_summary(*outcome.plan).find("precision        bf16-autocast"), std::string::npos);

    executor::ExecuteOptions run;
    run.steps = 2;
    const core::Report report = executor::execute(*outcome.plan, trace, "p.json", run);
    ASSERT_EQ(report.status, "ok") << name;
    EXPECT_LE(report.measured.peak_bytes, outcome.plan->budget_bytes) << name;
    EXPECT_GE(report.predicted.peak_bytes, report.measured.peak_bytes) << name;
    EXPECT_LE(static_cast<double>(report.predicted.peak_bytes), 1.01 * static_cast<double>(report.measured.peak_bytes)) << name;

    // A plan and a trace of different precisions do not go together.
    const fs::path dir = fs::temp_directory_path() / ("headroom-precision-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    core::write_trace_file(dir / "t.json", trace);
    core::Plan plan = *outcome.plan;
    plan.trace_path = (dir / "t.json").string();
    plan.trace_sha256 = core::sha256_hex(core::read_file(dir / "t.json"));
    EXPECT_NO_THROW(core::load_plan_trace(plan, dir / "p.json"));
    plan.precision = core::Precision::Fp32;
    EXPECT_NE(error_of([&] { core::load_plan_trace(plan, dir / "p.json"); })
                  .find("the plan runs the step in fp32 but its trace was measured in bf16-autocast"),
              std::string::npos);
    EXPECT_NE(error_of([&] { executor::execute(plan, trace, "p.json", run); })
                  .find("the plan runs the step in fp32 but its trace was measured in bf16-autocast"),
              std::string::npos);
    fs::remove_all(dir);
    // Compared with the same model in fp32, the difference is named as the precision's.
    core::Trace fp32 = trace;
    fp32.precision = core::Precision::Fp32;
    const auto comparison = report::compare_traces(fp32, trace, {});
    EXPECT_NE(std::find(comparison.warnings.begin(), comparison.warnings.end(),
                        "the traces measured the step in different precisions (fp32 and bf16-autocast)"),
              comparison.warnings.end());
  }
}

TEST(Precision, WhatIsNotBuiltIsRefusedByName) {
  EXPECT_EQ(core::parse_precision("bf16-autocast"), core::Precision::Bf16Autocast);
  EXPECT_NE(error_of([] { core::parse_precision("fp8", "--precision"); })
                .find("--precision: 'fp8' is not a precision (known: fp32, bf16-autocast, fp16-autocast, bf16)"),
            std::string::npos);
  models::Model model = models::build_zoo_model("mlp", kMlp, 0);
  profiler::ProfileOptions options;
  options.batch_sizes = {1};
  options.precision = core::Precision::Fp16Autocast;
  EXPECT_NE(error_of([&] { profiler::profile(model, options); }).find("fp16-autocast runs on CUDA"), std::string::npos);
  options.precision = core::Precision::Bf16;
  EXPECT_NE(error_of([&] { profiler::profile(model, options); }).find("bf16 (bfloat16 parameters with float32 master weights) is not implemented yet"),
            std::string::npos);
  models::Model clip = models::build_zoo_model("clip", {}, 0);
  options.precision = core::Precision::Bf16Autocast;
  EXPECT_NE(error_of([&] { profiler::profile(clip, options); }).find("is not measured for a contrastive loss"), std::string::npos);
}

}  // namespace
}  // namespace headroom
