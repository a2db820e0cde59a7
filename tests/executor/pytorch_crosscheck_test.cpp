// headroom against PyTorch itself, on real models exported by examples/: one optimizer
// step of a micro-batched, checkpointed plan against one full-batch step in Python from the same
// weights and data, and headroom's measured peak of a plain step against torch.profiler's. Needs
// Debian's python3-torch and python3-torchvision (scripts/install-deps.sh --with-pytorch); skips, saying
// so, without them.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/atomic_file.h"
#include "executor/plan_runner.h"
#include "models/torchscript_model.h"
#include "profiler/profiler.h"
#include "runtime/optimizer.h"
#include "support/bfloat16_rounding.h"
#include "support/build_paths.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

const fs::path kExamples = fs::path(HEADROOM_SOURCE_DIR) / "examples";

int run(const std::string& command) {
  const int status = std::system((command + " > /tmp/headroom-crosscheck.log 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string log_text() {
  std::ifstream in("/tmp/headroom-crosscheck.log");
  return {std::istreambuf_iterator<char>(in), {}};
}

struct Exported {
  std::string file;
  std::map<std::string, std::string> config;
};

class PyTorchCrossCheck : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The example scripts find Debian's interpreter themselves (exit 77 without torch).
    const int probe = run("python3 " + (kExamples / "pytorch_step.py").string() + " versions");
    if (probe != 0) {
      skip_reason_ = "python3-torch and python3-torchvision are not installed (./scripts/install-deps.sh --with-pytorch): " +
                     log_text();
      return;
    }
    directory_ = fs::temp_directory_path() / ("headroom-crosscheck-" + std::to_string(::getpid()));
    fs::create_directories(directory_);
    const int exported = run("python3 " + (kExamples / "export_torchvision.py").string() +
                             " --models resnet18,decoder --image-size 32 --vocab 512 --seq 16 --d-model 64 --heads 4 "
                             "--layers 2 --out " + directory_.string());
    ASSERT_EQ(exported, 0) << log_text();
    ASSERT_EQ(run("python3 " + (kExamples / "export_language_model.py").string() +
                  " --vocab 512 --hidden 64 --heads 4 --layers 3 --seq 16 --out " + directory_.string()),
              0)
        << log_text();
  }
  static void TearDownTestSuite() {
    if (!directory_.empty()) fs::remove_all(directory_);
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }

  // The chains' children as the layers (--depth 1), so the blocks are the stages the tests name.
  static Exported resnet18() {
    return {(directory_ / "resnet18.pt").string(), {{"input", "3x32x32:float32"}, {"depth", "1"}}};
  }
  static Exported decoder() { return {(directory_ / "decoder.pt").string(), {{"input", "16:int64:0-512"}, {"depth", "1"}}}; }
  // A language model as one writes it, with token ids and an attention mask; its blocks at depth 2.
  static Exported language_model() {
    return {(directory_ / "language_model.pt").string(), {{"input", "16:int64:0-512,16:int64:0-2"}, {"depth", "2"}}};
  }

  // At headroom's threads: torch's default in Python is the physical cores (1 on a 2-vCPU machine),
  // headroom's the logical ones, and the threads decide how reductions split (BatchNorm's sums) and
  // what per-thread buffers a step allocates.
  static nlohmann::json python(const std::string& arguments) {
    const fs::path out = directory_ / "result.json";
    const int status = run("python3 " + (kExamples / "pytorch_step.py").string() + " " + arguments + " --threads " +
                           std::to_string(at::get_num_threads()) + " --out " + out.string());
    EXPECT_EQ(status, 0) << log_text();
    return nlohmann::json::parse(core::read_file(out));
  }

  static inline std::string skip_reason_;
  static inline fs::path directory_;
};

// The block of the layer named `layer`.
int model_block(const Exported& exported, const std::string& layer) {
  const models::Model model = models::load_torchscript_model(exported.file, exported.config, 0);
  for (const auto& l : model.layers()) {
    if (l.name == layer) return l.block;
  }
  ADD_FAILURE() << "no layer " << layer;
  return -1;
}

// --input once per input the config lists.
std::string input_flags(const Exported& exported) {
  std::string flags;
  std::string inputs = exported.config.at("input") + ",";
  for (std::size_t start = 0, end; (end = inputs.find(',', start)) != std::string::npos; start = end + 1) {
    flags += " --input " + inputs.substr(start, end - start);
  }
  return flags;
}

// What loading keeps besides the parameters and buffers (the module's debug records): headroom counts
// it, PyTorch's profiler does not see it. Buffers (BatchNorm's statistics) both count.
std::int64_t debug_record_bytes(const models::Model& model) {
  std::int64_t buffers = 0;
  for (const auto& b : model.buffers()) buffers += static_cast<std::int64_t>(b.numel() * b.element_size());
  return model.extra_resident_bytes() - buffers;
}

// One step as headroom runs a plan: micro-batches of `micro` with `checkpointed` blocks, weights
// b_i/B, then SGD; BatchNorm on running statistics and dropout off, so the step computes the same
// function as the full batch. Returns Python's comparison of its weights and gradients.
nlohmann::json planned_step_against_pytorch(const Exported& exported, const std::vector<std::int64_t>& micro,
                                            const std::vector<int>& checkpointed, const fs::path& directory,
                                            const std::function<nlohmann::json(const std::string&)>& python,
                                            core::Precision precision = core::Precision::Fp32,
                                            std::optional<core::Precision> reference = std::nullopt) {
  models::Model model = models::load_torchscript_model(exported.file, exported.config, 0);
  model.set_precision(precision);
  model.set_training(true);
  model.set_batchnorm_eval(true);
  model.set_dropout(false);
  executor::Position position;
  executor::PlanRunner runner(model, checkpointed, position);
  const auto batches = executor::make_micro_batches(model, micro, 11, torch::kCPU);
  std::int64_t total = 0;
  for (const auto b : micro) total += b;
  const auto parameters = model.parameters();
  auto optimizer = runtime::make_optimizer("sgd", parameters);
  optimizer->zero_grad();
  runner.accumulate(batches, total);
  const auto gradients = executor::gradients_of(parameters);
  optimizer->step();

  const models::Batch whole = executor::concatenate(batches);
  c10::Dict<std::string, torch::Tensor> data;
  data.insert("input", whole.input);
  for (std::size_t k = 0; k < whole.further_inputs.size(); ++k) data.insert("input." + std::to_string(k + 1), whole.further_inputs[k]);
  data.insert("target", whole.target);
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    data.insert("param." + std::to_string(i), parameters[i].detach());
    data.insert("grad." + std::to_string(i), gradients[i]);
  }
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(data));
  const fs::path path = directory / "step-data.pt";
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const core::Precision theirs = reference.value_or(precision);
  return python("step --model " + exported.file + " --data " + path.string() + " --loss cross-entropy-last --optimizer sgd" +
                (theirs == core::Precision::Bf16Autocast ? " --autocast bf16 --no-graph-optimize" : "") +
                (theirs == core::Precision::Bf16 ? " --dtype bf16 --no-graph-optimize" : "") +
                (theirs == core::Precision::Fp32 ? " --float64-reference" : ""));
}

// A float32 step's gradients are the exact (float64) ones rounded: how far from them depends on the
// order each kernel sums in, which differs between CPUs' vector units and between one batch and
// three micro-batches. headroom's micro-batched gradients are held to the float32 full batch's own
// distance from the exact ones (norm-relative, over all parameters): within a small multiple, for
// the accumulation of micro-batches adds a few roundings of its own.
void expect_float32_rounding_only(const nlohmann::json& step) {
  const double ours = step.at("headroom_grad_error_float64").get<double>();
  const double reference = step.at("pytorch_grad_error_float64").get<double>();
  EXPECT_LE(ours, 4 * reference) << step.dump();
  // Rounding, not another function: a float64 step that computed something else (other data, dropout
  // on) would be as far from either as the gradients are large.
  EXPECT_LT(reference, 1e-3) << "the float64 step computes another function: " << step.dump();
}

void print_step(const char* what, const nlohmann::json& step) {
  std::printf("%s, SGD: weights %.3g, gradients %.3g (largest entry); gradients from float64's: headroom %.3g, PyTorch %.3g\n",
              what, step["max_rel_diff"].get<double>(), step["max_rel_diff_grad"].get<double>(),
              step["headroom_grad_error_float64"].get<double>(), step["pytorch_grad_error_float64"].get<double>());
}

TEST_F(PyTorchCrossCheck, PlannedStepEndsWithPyTorchsFullBatchWeights) {
  const auto py = [](const std::string& a) { return python(a); };
  // resnet18: 6 layers (stem, four stages, head); stages 1 and 2 checkpointed.
  const auto resnet = planned_step_against_pytorch(resnet18(), {4, 2}, {1, 2}, directory_, py);
  RecordProperty("resnet18_max_rel_diff", std::to_string(resnet["max_rel_diff"].get<double>()));
  EXPECT_LE(resnet["max_rel_diff"].get<double>(), 1e-5) << resnet.dump();
  expect_float32_rounding_only(resnet);
  print_step("resnet18 32x32, micro-batches 4+2, stages 1-2 checkpointed", resnet);

  // The decoder: embedding, two blocks, head; both blocks checkpointed.
  const auto gpt = planned_step_against_pytorch(decoder(), {3, 3, 2}, {1, 2}, directory_, py);
  EXPECT_LE(gpt["max_rel_diff"].get<double>(), 1e-5) << gpt.dump();
  expect_float32_rounding_only(gpt);
  print_step("decoder, micro-batches 3+3+2, both blocks checkpointed", gpt);

  // The language model's two inputs reach its blocks, and its blocks checkpoint.
  const Exported lm = language_model();
  {
    const models::Model model = models::load_torchscript_model(lm.file, lm.config, 0);
    ASSERT_EQ(model.layers()[4].name, "blocks.1");
    EXPECT_EQ(model.layers()[4].inputs, (std::vector<int>{3, models::model_input_id(1)}));
  }
  const auto language = planned_step_against_pytorch(lm, {3, 3, 2}, {model_block(lm, "blocks.1"), model_block(lm, "blocks.2")},
                                                     directory_, py);
  EXPECT_LE(language["max_rel_diff"].get<double>(), 1e-5) << language.dump();
  expect_float32_rounding_only(language);
  print_step("language model (ids and mask), micro-batches 3+3+2, blocks.1-2 checkpointed", language);
}

// torchvision's classifiers as torchvision builds them (examples/export_classifiers.py), cut at
// headroom's default depth: a micro-batched step with two of their blocks checkpointed ends with
// the weights of PyTorch's full-batch step, and the plain step's peak is torch.profiler's. The
// models are HEADROOM_CROSSCHECK_CLASSIFIERS (comma-separated; all eleven for the table in
// docs/results.md, "Against PyTorch"), by default two small ones.
TEST_F(PyTorchCrossCheck, UnmodifiedClassifiersStepAsPyTorchDoes) {
  const char* listed = std::getenv("HEADROOM_CROSSCHECK_CLASSIFIERS");
  const std::string models = listed != nullptr && *listed != '\0' ? listed : "resnet18,mobilenet_v2";
  const fs::path out = directory_ / "classifiers";
  ASSERT_EQ(run("python3 " + (kExamples / "export_classifiers.py").string() + " --models " + models +
                " --image-size 64 --out " + out.string()),
            0)
      << log_text();
  const auto py = [](const std::string& a) { return python(a); };
  std::size_t start = 0;
  while (start <= models.size()) {
    const std::size_t end = std::min(models.find(',', start), models.size());
    const std::string name = models.substr(start, end - start);
    start = end + 1;
    if (name.empty()) continue;
    const Exported exported{(out / (name + ".pt")).string(), {{"input", "3x64x64:float32"}}};
    // Two checkpointable blocks from the middle of the model.
    std::vector<int> blocks;
    {
      models::Model model = models::load_torchscript_model(exported.file, exported.config, 0);
      std::vector<int> checkpointable;
      executor::Position position;
      for (int b = 1; b + 1 < model.block_count(); ++b) {
        try {
          executor::PlanRunner probe(model, {b}, position);
          checkpointable.push_back(b);
        } catch (const std::exception&) {
        }
      }
      ASSERT_GE(checkpointable.size(), 2u) << name;
      blocks = {checkpointable[checkpointable.size() / 3], checkpointable[2 * checkpointable.size() / 3]};
    }
    const auto step = planned_step_against_pytorch(exported, {4, 2}, blocks, directory_, py);
    std::printf("%s 64x64, micro-batches 4+2, blocks %d and %d checkpointed, SGD: weights %.3g, gradients %.3g\n",
                name.c_str(), blocks.front(), blocks.back(), step["max_rel_diff"].get<double>(),
                step["max_rel_diff_grad"].get<double>());
    EXPECT_LE(step["max_rel_diff"].get<double>(), 1e-5) << name << " " << step.dump();
    expect_float32_rounding_only(step);

    models::Model model = models::load_torchscript_model(exported.file, exported.config, 0);
    profiler::ProfileOptions options;
    options.batch_sizes = {8};
    options.repeats = 1;
    options.optimizer = "sgd";
    const core::Trace trace = profiler::profile(model, options);
    const nlohmann::json peak = python("peak --model " + exported.file + " --input 3x64x64:float32 --batch 8 --optimizer sgd");
    const auto headroom_peak = static_cast<double>(trace.steps.front().peak_bytes - debug_record_bytes(model));
    const double torch_peak = peak["peak_bytes"].get<double>();
    std::printf("%s plain step at batch 8: headroom %.0f B, torch.profiler %.0f B: %+.2f%%\n", name.c_str(), headroom_peak,
                torch_peak, 100 * (headroom_peak - torch_peak) / torch_peak);
    EXPECT_NEAR(headroom_peak, torch_peak, 0.005 * torch_peak) << name << " " << peak.dump();
  }
}

// headroom's profiled peak of a plain step (static bytes, the batch, the step's highest allocation
// above its start) against torch.profiler's of the same step in Python.
TEST_F(PyTorchCrossCheck, PlainStepPeakAgreesWithTorchProfiler) {
  for (const auto& [exported, batch] :
       {std::pair{resnet18(), std::int64_t{8}}, {decoder(), std::int64_t{8}}, {language_model(), std::int64_t{8}}}) {
    models::Model model = models::load_torchscript_model(exported.file, exported.config, 0);
    profiler::ProfileOptions options;
    options.batch_sizes = {batch};
    options.repeats = 1;
    options.optimizer = "sgd";
    const core::Trace trace = profiler::profile(model, options);
    const core::StepSample& step = trace.steps.front();
    const nlohmann::json py = python("peak --model " + exported.file + input_flags(exported) + " --batch " +
                                     std::to_string(batch) + " --optimizer sgd --loss cross-entropy-last");
    // Both sides hold parameters, gradients, momentum and buffers; headroom also counts the
    // module's debug records (what loading keeps), which PyTorch's profiler does not see.
    const std::int64_t debug_records = debug_record_bytes(model);
    const auto headroom_peak = static_cast<double>(step.peak_bytes - debug_records);
    const double torch_peak = py["peak_bytes"].get<double>();
    std::printf("%s at batch %lld: headroom %.0f B (static %lld, less %lld B of debug records), torch.profiler %.0f B "
                "(static %lld): %.2f%%\n",
                fs::path(exported.file).stem().c_str(), static_cast<long long>(batch), headroom_peak,
                static_cast<long long>(step.static_bytes), static_cast<long long>(debug_records), torch_peak,
                py["static_bytes"].get<long long>(), 100 * (headroom_peak - torch_peak) / torch_peak);
    EXPECT_NEAR(headroom_peak, torch_peak, 0.005 * torch_peak) << py.dump();
  }
}

// Under bf16 autocast the language model's step against PyTorch's under torch.autocast, same weights
// and data: as one batch, the same arithmetic; in micro-batches, what bfloat16's 8 bits of mantissa
// make of sums over fewer samples; and how far either is from the fp32 step.
TEST_F(PyTorchCrossCheck, Bf16AutocastStepAgainstPyTorchsAndFp32) {
  const auto py = [](const std::string& a) { return python(a); };
  const Exported lm = language_model();
  const auto whole = planned_step_against_pytorch(lm, {8}, {}, directory_, py, core::Precision::Bf16Autocast);
  const auto micro = planned_step_against_pytorch(lm, {3, 3, 2}, {model_block(lm, "blocks.1")}, directory_, py,
                                                  core::Precision::Bf16Autocast);
  std::printf("language model under bf16 autocast against PyTorch's: one batch of 8 gradients %.3g, weights %.3g; "
              "micro-batches 3+3+2 with blocks.1 checkpointed gradients %.3g, weights %.3g\n",
              whole["max_rel_diff_grad"].get<double>(), whole["max_rel_diff"].get<double>(),
              micro["max_rel_diff_grad"].get<double>(), micro["max_rel_diff"].get<double>());
  EXPECT_LE(whole["max_rel_diff_grad"].get<double>(), 1e-5) << whole.dump();
  // bfloat16: a sum over 3 samples rounds differently from one over 8.
  EXPECT_LE(micro["max_rel_diff_grad"].get<double>(), 5e-2) << micro.dump();
  // headroom's bf16 step against PyTorch's fp32 step of the same batch: what bf16 costs in accuracy.
  const auto cost = planned_step_against_pytorch(lm, {8}, {}, directory_, py, core::Precision::Bf16Autocast,
                                                 core::Precision::Fp32);
  std::printf("language model: headroom's bf16-autocast step against PyTorch's fp32 step: gradients %.3g, weights %.3g, "
              "loss %.6g (bf16) against %.6g\n",
              cost["max_rel_diff_grad"].get<double>(), cost["max_rel_diff"].get<double>(), whole["loss"].get<double>(),
              cost["loss"].get<double>());
  EXPECT_GT(cost["max_rel_diff_grad"].get<double>(), whole["max_rel_diff_grad"].get<double>());
  EXPECT_LT(cost["max_rel_diff_grad"].get<double>(), testing::kBfloat16RoundingOnly) << cost.dump();
}

// Under bf16 (the model in bfloat16, the loss on float32 logits, SGD on float32 master weights) the
// language model's step against PyTorch's with model.to(torch.bfloat16), same weights and data; and
// against PyTorch's fp32 step, which says what bf16 costs in accuracy.
TEST_F(PyTorchCrossCheck, Bf16StepAgainstPyTorchsAndFp32) {
  const auto py = [](const std::string& a) { return python(a); };
  const Exported lm = language_model();
  const auto whole = planned_step_against_pytorch(lm, {8}, {}, directory_, py, core::Precision::Bf16);
  const auto micro = planned_step_against_pytorch(lm, {3, 3, 2}, {model_block(lm, "blocks.1")}, directory_, py,
                                                  core::Precision::Bf16);
  const auto cost = planned_step_against_pytorch(lm, {8}, {}, directory_, py, core::Precision::Bf16, core::Precision::Fp32);
  std::printf("language model in bf16 against PyTorch's: one batch of 8 gradients %.3g, weights %.3g; micro-batches "
              "3+3+2 with blocks.1 checkpointed gradients %.3g, weights %.3g; against PyTorch's fp32 step gradients %.3g, "
              "weights %.3g, loss %.6g (bf16) against %.6g\n",
              whole["max_rel_diff_grad"].get<double>(), whole["max_rel_diff"].get<double>(),
              micro["max_rel_diff_grad"].get<double>(), micro["max_rel_diff"].get<double>(),
              cost["max_rel_diff_grad"].get<double>(), cost["max_rel_diff"].get<double>(), whole["loss"].get<double>(),
              cost["loss"].get<double>());
  EXPECT_LE(whole["max_rel_diff_grad"].get<double>(), 1e-5) << whole.dump();
  // Gradients accumulate across micro-batches in bfloat16, as PyTorch's do for a bf16 model.
  EXPECT_LE(micro["max_rel_diff_grad"].get<double>(), 5e-2) << micro.dump();
  EXPECT_GT(cost["max_rel_diff_grad"].get<double>(), whole["max_rel_diff_grad"].get<double>());
  EXPECT_LT(cost["max_rel_diff_grad"].get<double>(), testing::kBfloat16RoundingOnly) << cost.dump();
}

// Under bf16 autocast (forward and loss in the region, backward outside) the language model's plain
// step peaks where PyTorch's does when PyTorch runs the module's graph as headroom does (no graph
// executor optimizations: TorchScript's own autocast pass would rewrite the graph).
TEST_F(PyTorchCrossCheck, Bf16AutocastPlainStepPeakAgreesWithTorchProfiler) {
  const Exported exported = language_model();
  models::Model model = models::load_torchscript_model(exported.file, exported.config, 0);
  profiler::ProfileOptions options;
  options.batch_sizes = {8};
  options.repeats = 1;
  options.optimizer = "sgd";
  options.precision = core::Precision::Bf16Autocast;
  const core::Trace trace = profiler::profile(model, options);
  const nlohmann::json py = python("peak --model " + exported.file + input_flags(exported) +
                                   " --batch 8 --optimizer sgd --autocast bf16 --no-graph-optimize --loss cross-entropy-last");
  const auto headroom_peak = static_cast<double>(trace.steps.front().peak_bytes - debug_record_bytes(model));
  const double torch_peak = py["peak_bytes"].get<double>();
  std::printf("language_model under bf16 autocast at batch 8: headroom %.0f B, torch.profiler %.0f B: %.2f%%\n",
              headroom_peak, torch_peak, 100 * (headroom_peak - torch_peak) / torch_peak);
  EXPECT_NEAR(headroom_peak, torch_peak, 0.005 * torch_peak) << py.dump();
}

}  // namespace
}  // namespace headroom
