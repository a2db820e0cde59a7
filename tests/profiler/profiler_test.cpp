#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <atomic>
#include <cmath>
#include <mutex>

#include "core/affine_fit.h"
#include "core/cost_model.h"
#include "core/errors.h"
#include "core/host_memory.h"
#include "core/trace.h"
#include "core/transient_jumps.h"
#include "models/layers.h"
#include "models/model_source.h"
#include "models/zoo.h"
#include "profiler/profiler.h"
#include "runtime/host_info.h"
#include "runtime/optimizer.h"

namespace headroom {
namespace {

constexpr std::int64_t kFloat = 4;
constexpr std::int64_t D = 24, H = 40, C = 6;

// x[B, D] and labels[B] in [0, C), as the stacks below read them.
models::BatchGenerator stack_batches() {
  return [](std::int64_t b, std::uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    return models::Batch{torch::randn({b, D}, gen, torch::kFloat32), torch::randint(C, {b}, gen, torch::kInt64)};
  };
}

// x[B, D] -> Linear(D, H) -> GELU -> LayerNorm(H) -> Linear(H, C) -> cross-entropy against labels[B].
models::Model make_stack() {
  torch::manual_seed(0);
  models::Model model("stack", models::Config("stack", {}));
  int x = models::add_linear(model, "fc1", D, H, {models::kModelInput});
  x = models::add_gelu(model, "gelu", {x});
  x = models::add_layernorm(model, "ln", H, {x});
  x = models::add_linear(model, "fc2", H, C, {x});
  models::add_cross_entropy(model, "loss", x);
  model.set_batch_generator(stack_batches());
  return model;
}

// What each layer allocates, and what stays allocated, computed from shapes and from what libtorch
// saves for backward:
//   fc1 (addmm): output [B,H]; kept because GELU saves its input.
//   gelu: output [B,H]; kept because LayerNorm saves its input.
//   ln (native_layer_norm): output [B,H], mean [B] and rstd [B], the latter two saved by itself;
//     the output is kept because fc2 saves its input (for the weight gradient).
//   fc2: output [B,C]; not kept: log_softmax saves its result, not its input.
//   loss: log_softmax's result [B,C] (saved by itself and by nll_loss), nll_loss's scalar output
//     and its scalar total_weight (saved).
struct Expected {
  std::int64_t kept, output, fwd_transient;
};
std::vector<Expected> expected_bytes(std::int64_t b) {
  return {
      {kFloat * b * H, kFloat * b * H, kFloat * b * H},
      {kFloat * b * H, kFloat * b * H, kFloat * b * H},
      {kFloat * b * H + 2 * kFloat * b, kFloat * b * H, kFloat * b * H + 2 * kFloat * b},
      {0, kFloat * b * C, kFloat * b * C},
      {kFloat * b * C + 2 * kFloat, kFloat, kFloat * b * C + 2 * kFloat},
  };
}

TEST(Profiler, PerLayerBytesEqualHandComputedValues) {
  for (const std::int64_t b : {1, 3, 8}) {
    SCOPED_TRACE("batch " + std::to_string(b));
    auto recorder = std::make_shared<runtime::MemoryRecorder>();
    runtime::ScopedMemoryRecording recording(recorder);
    // Recording starts before the model exists, so everything allocated is seen.
    models::Model model = make_stack();
    const models::Batch batch = model.make_batch(b, 1);
    const auto step = profiler::profile_step(model, batch, *recorder, nullptr);

    const auto expected = expected_bytes(b);
    std::int64_t kept_sum = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      SCOPED_TRACE(model.layers()[i].name);
      EXPECT_EQ(step.layers[i].kept_bytes, expected[i].kept);
      EXPECT_EQ(step.layers[i].output_bytes, expected[i].output);
      EXPECT_EQ(step.layers[i].fwd_transient_bytes, expected[i].fwd_transient);
      kept_sum += step.layers[i].kept_bytes;
    }
    // GELU's backward allocates exactly its input gradient [B,H].
    EXPECT_EQ(step.layers[1].bwd_transient_bytes, kFloat * b * H);
    // What each layer's forward leaves behind adds up to the growth of the whole forward.
    std::int64_t fwd_retained = 0;
    for (const auto& layer : step.layers) fwd_retained += layer.fwd_retained_bytes;
    EXPECT_EQ(fwd_retained, step.allocated_at_forward_end - step.allocated_at_step_start);

    // Nothing is allocated in forward outside a layer: the kept bytes account for everything that
    // is allocated at the end of forward, apart from the parameters and the batch.
    EXPECT_EQ(kept_sum, step.allocated_at_forward_end - model.parameter_bytes() - batch.bytes());
    EXPECT_EQ(recorder->untracked_frees(), 0);
  }
}

TEST(Profiler, DetectsWhichInputsALayerSaves) {
  models::Model model = make_stack();
  const auto saves = profiler::detect_saved_tensors(model, model.make_batch(2, 1)).inputs;
  // Cross-entropy keeps its log-probabilities, not the logits, and keeps the labels.
  const std::vector<std::vector<bool>> expected{{true}, {true}, {true}, {true}, {false, true}};
  EXPECT_EQ(saves, expected);

  auto bert = models::build_zoo_model(
      "bert", {{"preset", "tiny"}, {"hidden", "32"}, {"heads", "2"}, {"seq", "8"}, {"vocab", "50"}});
  const auto bert_saved = profiler::detect_saved_tensors(bert, bert.make_batch(2, 1));
  const auto& bert_saves = bert_saved.inputs;
  bert.set_all_variants(core::LayerVariant::Tempo);
  const auto tempo_saved = profiler::detect_saved_tensors(bert, bert.make_batch(2, 1));
  for (std::size_t i = 0; i < bert.layers().size(); ++i) {
    const auto& layer = bert.layers()[i];
    SCOPED_TRACE(layer.name);
    // Dropout keeps its mask, an add keeps nothing, attention keeps its own per-head copies of
    // q, k and v; GELU, LayerNorm and linear keep their input.
    if (layer.kind == "dropout" || layer.kind == "add" || layer.kind == "attention") {
      for (const bool s : bert_saves[i]) EXPECT_FALSE(s);
    }
    if (layer.kind == "gelu" || layer.kind == "layernorm" || layer.kind == "linear") {
      EXPECT_TRUE(bert_saves[i][0]);
    }
    // Tempo's GELU and LayerNorm keep their output instead of their input; standard ones do not.
    if (layer.kind == "gelu" || layer.kind == "layernorm") {
      EXPECT_FALSE(bert_saved.output[i]);
      EXPECT_FALSE(tempo_saved.inputs[i][0]);
      EXPECT_TRUE(tempo_saved.output[i]);
    }
  }
}

TEST(Profiler, LayerTimesArePositiveAndAddUpToTheStep) {
  auto model = models::build_zoo_model(
      "bert", {{"preset", "tiny"}, {"hidden", "64"}, {"heads", "2"}, {"seq", "32"}, {"vocab", "100"}});
  model.set_training(true);
  auto optimizer = runtime::make_optimizer("adam", model.parameters());
  const auto batch = model.make_batch(4, 1);
  for (int i = 0; i < 2; ++i) profiler::profile_step(model, batch, *std::make_shared<runtime::MemoryRecorder>(), optimizer.get());

  auto recorder = std::make_shared<runtime::MemoryRecorder>();
  runtime::ScopedMemoryRecording recording(recorder);
  const auto step = profiler::profile_step(model, batch, *recorder, optimizer.get());
  std::int64_t layer_sum = 0;
  for (std::size_t i = 0; i < step.layers.size(); ++i) {
    SCOPED_TRACE(model.layers()[i].name);
    EXPECT_GT(step.layers[i].fwd_ns, 0);
    EXPECT_GT(step.layers[i].bwd_ns, 0);
    layer_sum += step.layers[i].fwd_ns + step.layers[i].bwd_ns;
  }
  const double accounted = static_cast<double>(layer_sum + step.optimizer_ns);
  EXPECT_NEAR(accounted / static_cast<double>(step.step_ns), 1.0, 0.15);
  EXPECT_EQ(step.forward_ns + step.backward_ns + step.optimizer_ns, step.step_ns);
}

// Stands in for CUDA and CUPTI: every range pushed "launches" one 1 µs kernel whose correlation
// id maps to that range, so attribution can be checked on the CPU.
class FakeGpu : public profiler::gpu::GpuBackend, public profiler::gpu::ActivityCollector {
 public:
  const core::DeviceInfo& properties() const override { return properties_; }
  void synchronize() override { ++syncs; }
  profiler::gpu::ActivityCollector& activities() override { return *this; }

  void set_enabled(bool enabled) override { enabled_ = enabled; }
  void push_range(std::uint64_t id) override {
    ++depth;
    max_depth = std::max(max_depth, depth.load());
    std::lock_guard lock(mutex_);
    pushed_.push_back(id);
  }
  void pop_range() override {
    if (--depth < 0) unbalanced = true;
  }
  profiler::gpu::ActivityLog flush() override {
    std::lock_guard lock(mutex_);
    profiler::gpu::ActivityLog log;
    std::uint64_t t = 0;
    for (const auto id : pushed_) {
      const auto correlation = static_cast<std::uint32_t>(id);
      log.kernels.push_back({"k", t, t + 1000, 0, 7, correlation});
      log.external_ids[correlation] = id;
      t += 2000;
    }
    pushed_.clear();
    return log;
  }
  std::uint64_t now_ns() override { return 0; }

  std::atomic<int> depth{0};
  int max_depth = 0;
  bool unbalanced = false;
  int syncs = 0;

 private:
  core::DeviceInfo properties_{"cuda", "fake", 1LL << 30, 1, 1e9, 1e9};
  bool enabled_ = false;
  std::mutex mutex_;
  std::vector<std::uint64_t> pushed_;
};

TEST(Profiler, GpuRangesCoverEveryLayerPhaseOnceAndBalance) {
  models::Model model = make_stack();
  model.set_training(true);
  auto optimizer = runtime::make_optimizer("adam", model.parameters());
  const auto batch = model.make_batch(4, 1);
  FakeGpu gpu;
  auto recorder = std::make_shared<runtime::MemoryRecorder>();
  runtime::ScopedMemoryRecording recording(recorder);
  const auto step = profiler::profile_step(model, batch, *recorder, optimizer.get(), &gpu);

  ASSERT_TRUE(step.gpu.has_value());
  const auto& a = step.gpu->attribution;
  const std::size_t layers = model.layers().size();
  EXPECT_FALSE(gpu.unbalanced);
  EXPECT_EQ(gpu.depth.load(), 0);
  EXPECT_EQ(gpu.max_depth, 1);  // ranges never nest: a kernel has exactly one owner
  EXPECT_GE(gpu.syncs, 2 * static_cast<int>(layers));
  std::int64_t backward_kernels = 0;
  for (std::size_t i = 0; i < layers; ++i) {
    SCOPED_TRACE(model.layers()[i].name);
    EXPECT_EQ(a.forward[i].kernels, 1);
    EXPECT_EQ(a.forward[i].kernel_ns, 1000);
    EXPECT_GE(a.backward[i].kernels, 1);  // every layer here has a backward node
    backward_kernels += a.backward[i].kernels;
  }
  EXPECT_EQ(a.optimizer.kernels, 1);
  EXPECT_EQ(a.unattributed.kernels, 0);
  // Every range became one kernel and landed somewhere.
  EXPECT_EQ(static_cast<std::size_t>(a.kernel_ns / 1000),
            layers + static_cast<std::size_t>(backward_kernels) + 1);
  EXPECT_EQ(step.gpu->ranges.size(), layers + static_cast<std::size_t>(backward_kernels) + 1);
}

// A layer whose scratch steps between two of the sizes asked for (a kernel that takes a workspace
// from 12 samples on, as oneDNN's bfloat16 convolutions do at other sizes): the profiler halves that
// span until the step lies between neighbours (12, then 10, then 11), says why, and keeps the trace
// in batch order; with locate_steps 0 it profiles the sizes asked for alone.
TEST(Profiler, ProfilesSizesThatLocateAStepInALayersScratch) {
  constexpr std::int64_t kScratch = 16384;  // floats, from 12 samples on
  const auto build = [] {
    torch::manual_seed(0);
    models::Model model("stack", models::Config("stack", {}));
    int x = models::add_linear(model, "fc1", D, H, {models::kModelInput});
    models::Layer scratch;
    scratch.name = "scratch";
    scratch.kind = "relu";
    scratch.inputs = {x};
    scratch.forward = [](const std::vector<torch::Tensor>& in, const models::RunContext&) {
      const torch::Tensor work = torch::zeros({in[0].size(0) >= 12 ? kScratch : 0});  // freed as the layer returns
      return torch::relu(in[0]) + work.sum();
    };
    x = model.add_layer(std::move(scratch));
    x = models::add_linear(model, "fc2", H, C, {x});
    models::add_cross_entropy(model, "loss", x);
    model.set_batch_generator(stack_batches());
    return model;
  };
  profiler::ProfileOptions options;
  options.batch_sizes = {1, 2, 4, 8, 16, 32};
  options.repeats = 1;
  options.calibrate = false;
  std::vector<std::string> notes;
  options.on_progress = [&](const profiler::Progress& p) {
    if (!p.note.empty()) notes.push_back(p.note);
    EXPECT_LE(p.step, p.total);
  };
  models::Model model = build();
  const core::Trace trace = profiler::profile(model, options);
  EXPECT_EQ(trace.batch_sizes, (std::vector<std::int64_t>{1, 2, 4, 8, 10, 11, 12, 16, 32}));
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_NE(notes[0].find("scratch's forward scratch may step by up to"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("between batches 8 and 16: profiling 12 as well"), std::string::npos) << notes[0];
  EXPECT_NE(notes[2].find("between batches 10 and 12: profiling 11 as well"), std::string::npos) << notes[2];
  for (std::size_t k = 0; k < trace.batch_sizes.size(); ++k) {
    EXPECT_EQ(trace.steps[k].batch, trace.batch_sizes[k]);
    for (const auto& layer : trace.layers) EXPECT_EQ(layer.samples[k].batch, trace.batch_sizes[k]) << layer.name;
    ASSERT_TRUE(trace.steps[k].sequence);
    EXPECT_GT(trace.steps[k].sequence->timed_sequences, 0);
  }
  // The step is between 11 and 12, and nothing is left to locate.
  const auto fwd_at = [&](std::int64_t b) {
    return trace.layers[1].samples[static_cast<std::size_t>(trace.batch_index(b))].fwd_transient_bytes;
  };
  EXPECT_EQ(fwd_at(12) - fwd_at(11), fwd_at(11) - fwd_at(10) + kScratch * kFloat);
  EXPECT_TRUE(core::transient_jumps(trace).empty());
  EXPECT_EQ(core::trace_from_json(core::to_json(trace)), trace);

  options.locate_steps = 0;
  notes.clear();
  model = build();
  EXPECT_EQ(profiler::profile(model, options).batch_sizes, options.batch_sizes);
  EXPECT_TRUE(notes.empty());
}

TEST(Profiler, KeptBytesGrowAffinelyWithBatch) {
  for (const std::string name : {"mlp", "bert", "cnn"}) {
    SCOPED_TRACE(name);
    std::map<std::string, std::string> small;
    if (name == "mlp") small = {{"input", "16"}, {"hidden", "32"}, {"depth", "2"}};
    if (name == "bert") small = {{"preset", "tiny"}, {"hidden", "32"}, {"heads", "2"}, {"seq", "8"}, {"vocab", "50"}};
    if (name == "cnn") small = {{"image", "12"}, {"width", "4"}, {"stages", "2"}};
    auto model = models::build_zoo_model(name, small);
    profiler::ProfileOptions options;
    options.batch_sizes = {1, 2, 3, 5};
    options.repeats = 1;
    const core::Trace trace = profiler::profile(model, options);
    for (const auto& layer : trace.layers) {
      std::vector<std::int64_t> kept;
      for (const auto& s : layer.samples) kept.push_back(s.kept_bytes);
      EXPECT_LT(core::fit_affine(trace.batch_sizes, kept).max_abs_residual, 0.5) << layer.name;
    }
    // The trace is complete and survives its own validation.
    EXPECT_EQ(core::trace_from_json(core::to_json(trace)), trace);
    for (const auto& step : trace.steps) EXPECT_GT(step.peak_bytes, step.static_bytes + step.input_bytes);
  }
}

TEST(Profiler, AdamStateIsTwoFloatsPerParameter) {
  auto model = models::build_zoo_model("mlp", {{"input", "16"}, {"hidden", "32"}, {"depth", "2"}});
  profiler::ProfileOptions options;
  options.batch_sizes = {2};
  options.repeats = 1;
  const core::Trace trace = profiler::profile(model, options);
  EXPECT_DOUBLE_EQ(trace.optimizer.state_bytes_per_param, 8.0);
  EXPECT_EQ(trace.optimizer.state_bytes, 2 * model.parameter_bytes());
  // Parameters, their gradients and Adam's two moments, and what else the model holds (its task's
  // teacher, kept by the batch generator).
  EXPECT_GT(model.extra_resident_bytes(), 0);
  EXPECT_EQ(trace.model_extra_bytes, model.extra_resident_bytes());
  EXPECT_EQ(trace.steps[0].static_bytes, 4 * model.parameter_bytes() + model.extra_resident_bytes());
  // Adam's update builds per-parameter temporaries (the denominator): at least the largest one.
  std::int64_t largest = 0;
  for (const auto& p : model.parameters()) largest = std::max<std::int64_t>(largest, p.numel() * p.element_size());
  EXPECT_GE(trace.steps[0].optimizer_transient_bytes, largest);
}

// A trace says which host-memory regime it was measured in (the one profiling enters),
// and times every batch size as a sequence of micro-batches, the way the executor runs a step.
TEST(Profiler, RecordsTheRegimeAndTimesStepsAsSequences) {
  auto model = models::build_zoo_model("mlp", {{"input", "16"}, {"hidden", "32"}, {"depth", "2"}});
  profiler::ProfileOptions options;
  options.batch_sizes = {2, 4};
  options.repeats = 1;
  profiler::Progress last;
  options.on_progress = [&](const profiler::Progress& p) { last = p; };
  const core::Trace trace = profiler::profile(model, options);
  // The total counts what ran, the timing rounds included, and the calibration comes last.
  EXPECT_EQ(last.step, last.total);
  EXPECT_EQ(last.phase, "calibration");
  EXPECT_EQ(trace.host_memory_regime, core::regime_of_process());
  EXPECT_NE(trace.host_memory_regime.find("mmap_threshold="), std::string::npos) << trace.host_memory_regime;
  for (const auto& step : trace.steps) {
    SCOPED_TRACE(step.batch);
    ASSERT_TRUE(step.sequence.has_value());
    EXPECT_GT(step.sequence->micro_batch_ns, 0);
    EXPECT_GT(step.sequence->first_micro_batch_ns, 0);
    EXPECT_GT(step.sequence->zero_grad_ns, 0);
    EXPECT_GT(step.optimizer_ns, 0);
    // A millisecond step: after every size was profiled, timing rounds (at most 20) timed it again
    // with the others, as many times at every size.
    EXPECT_GT(step.sequence->timed_sequences, options.repeats);
    EXPECT_LE(step.sequence->timed_sequences, options.repeats + 20);
    EXPECT_EQ(step.sequence->timed_sequences, trace.steps.front().sequence->timed_sequences);
  }
  EXPECT_EQ(trace.profile.timing_seconds, options.timing_seconds);
  // What reads the trace back charges a micro-batch what the sequence measured.
  const core::CostModel costs(trace);
  EXPECT_EQ(costs.micro_batch_ns(4), trace.steps[1].sequence->micro_batch_ns);
  // At the cores this process may use, timed before each batch size and at the end.
  EXPECT_EQ(trace.profile.threads, runtime::usable_cores());
  ASSERT_TRUE(trace.calibration.has_value());
  EXPECT_EQ(trace.calibration->runs.size(), options.batch_sizes.size() + 1);
  EXPECT_EQ(trace.calibration->threads, trace.profile.threads);
  EXPECT_EQ(trace.calibration->device, trace.device.name);
  EXPECT_GT(trace.calibration->compute(), 0);

  // Without timing rounds each size's times are its repeats alone; with half a second, at most five
  // rounds (ten a second).
  for (const double seconds : {0.0, 0.5}) {
    SCOPED_TRACE(seconds);
    options.timing_seconds = seconds;
    const core::Trace timed = profiler::profile(model, options);
    EXPECT_EQ(timed.profile.timing_seconds, seconds);
    for (const auto& step : timed.steps) {
      if (seconds == 0) {
        EXPECT_EQ(step.sequence->timed_sequences, options.repeats);
      } else {
        EXPECT_GT(step.sequence->timed_sequences, options.repeats);
        EXPECT_LE(step.sequence->timed_sequences, options.repeats + 5);
      }
    }
  }
}

// Profiling on the CPU stays within the host's memory: a batch past it is refused from
// two small micro-batches before it runs, naming the largest that fits, and that one runs; an
// allocation past it fails cleanly as not fitting, never as the system's out-of-memory kill.
TEST(Profiler, StaysWithinTheHostsMemory) {
  auto model = models::build_zoo_model("mlp", {{"input", "64"}, {"hidden", "256"}, {"depth", "2"}});
  profiler::ProfileOptions options;
  options.repeats = 1;
  options.host_memory_bytes = 16 << 20;
  options.batch_sizes = {2, 100000};
  std::string message;
  try {
    profiler::profile(model, options);
  } catch (const core::DoesNotFitError& e) {
    message = e.what();
  }
  const std::string marker = "the largest batch that fits is about ";
  ASSERT_NE(message.find("profiling batch 100000 needs about"), std::string::npos) << "[" << message << "]";
  const auto at = message.find(marker);
  ASSERT_NE(at, std::string::npos) << message;
  const std::int64_t largest = std::stoll(message.substr(at + marker.size()));
  EXPECT_GT(largest, 100);
  options.batch_sizes = {largest * 9 / 10};
  const core::Trace trace = profiler::profile(model, options);
  EXPECT_LE(trace.steps[0].peak_bytes - trace.steps[0].static_bytes, options.host_memory_bytes);

  options.batch_sizes = {2};
  options.host_memory_bytes = 4096;
  EXPECT_THROW(profiler::profile(model, options), core::DoesNotFitError);
}

TEST(Profiler, RejectsBadOptions) {
  auto model = make_stack();
  const auto rejects = [&](auto change) {
    profiler::ProfileOptions options;
    change(options);
    EXPECT_THROW(profiler::profile(model, options), core::InputError);
  };
  rejects([](auto& o) { o.batch_sizes = {4, 2}; });
  rejects([](auto& o) { o.batch_sizes = {}; });
  rejects([](auto& o) { o.batch_sizes = {0, 1}; });
  rejects([](auto& o) { o.warmup_steps = 0; });
  rejects([](auto& o) { o.repeats = 0; });
  rejects([](auto& o) { o.timing_seconds = -1; });
  rejects([](auto& o) { o.timing_seconds = std::nan(""); });
  rejects([](auto& o) { o.timing_seconds = core::kMaxTimingSeconds + 1; });
  rejects([](auto& o) { o.locate_steps = -1; });
  rejects([](auto& o) { o.locate_steps = profiler::ProfileOptions::kMaxLocateSteps + 1; });
  rejects([](auto& o) { o.optimizer = "lamb"; });
  if (!torch::cuda::is_available()) rejects([](auto& o) { o.device = "cuda"; });
  rejects([](auto& o) { o.device = "tpu"; });
}

// The host's optimizer rate a GPU trace keeps for L2L: timed on CPU copies (the parameters
// themselves, and their gradients, untouched), a positive time per element, of the optimizer named.
TEST(Profiler, TimesTheHostOptimizerOnCopiesOfTheParameters) {
  auto model = models::build_zoo_model("mlp", {{"input", "256"}, {"hidden", "1024"}, {"depth", "4"}});
  const std::vector<torch::Tensor> parameters = model.parameters();
  std::vector<torch::Tensor> before;
  for (const auto& p : parameters) before.push_back(p.detach().clone());
  for (const char* optimizer : {"adam", "sgd"}) {
    const double rate = profiler::host_optimizer_ns_per_param(optimizer, parameters);
    EXPECT_GT(rate, 0) << optimizer;
    EXPECT_TRUE(std::isfinite(rate)) << optimizer;
  }
  for (std::size_t k = 0; k < parameters.size(); ++k) {
    EXPECT_TRUE(torch::equal(parameters[k], before[k]));
    EXPECT_FALSE(parameters[k].grad().defined());
  }
  EXPECT_THROW(profiler::host_optimizer_ns_per_param("lion", parameters), core::InputError);
  EXPECT_EQ(profiler::host_optimizer_ns_per_param("adam", {}), 0);
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

// Another model's modules, as a module run whole reaches its own (ForeignModules).
class ModulesOf : public models::ForeignModules {
 public:
  explicit ModulesOf(models::Model& inner) : inner_(inner) {}
  std::vector<torch::Tensor> parameters() const override { return inner_.parameters(); }
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const override { return inner_.named_parameters(); }
  std::vector<torch::Tensor> buffers() const override { return inner_.buffers(); }
  void to(torch::Device device) override { inner_.to(device); }
  void set_modes(bool training, bool dropout, bool batchnorm_eval) override {
    inner_.set_training(training);
    inner_.set_dropout(dropout);
    inner_.set_batchnorm_eval(batchnorm_eval);
  }

 private:
  models::Model& inner_;
};

// A model run whole (as an eager capture runs the user's module: its forward reports its layers
// as they happen, what they keep is known beforehand) measures what the same model run layer by
// layer measures: every layer's kept, output and transient bytes, and the step's peak, to the byte.
TEST(Profiler, AModelRunWholeMeasuresWhatItsLayersRunOneByOneDo) {
  const std::map<std::string, std::string> mlp = {{"input", "16"}, {"hidden", "32"}, {"depth", "3"}};
  models::Model layered = models::build_zoo_model("mlp", mlp, 3);
  models::Model inner = models::build_zoo_model("mlp", mlp, 3);
  models::Model whole = models::build_zoo_model("mlp", mlp, 3);
  const profiler::SavedTensors saves = profiler::detect_saved_tensors(inner, inner.make_batch(2, 0));
  whole.set_whole_forward(std::make_shared<ModulesOf>(inner),
                          [&inner](const models::Batch& batch, models::LayerObserver* observer) {
                            return inner.forward(batch, observer);
                          },
                          models::KnownSaves{saves.inputs, saves.output}, "eager");
  EXPECT_THROW(whole.forward_to(whole.make_batch(2, 0), 1), std::logic_error);
  profiler::ProfileOptions options;
  options.batch_sizes = {1, 2, 4};
  options.repeats = 1;
  options.timing_seconds = 0;
  options.locate_steps = 0;
  const core::Trace by_layer = profiler::profile(layered, options);
  const core::Trace run_whole = profiler::profile(whole, options);
  EXPECT_EQ(run_whole.model.capture, "eager");
  ASSERT_EQ(run_whole.layers.size(), by_layer.layers.size());
  for (std::size_t i = 0; i < by_layer.layers.size(); ++i) {
    const auto& a = by_layer.layers[i];
    const auto& b = run_whole.layers[i];
    EXPECT_EQ(b.saves_inputs, a.saves_inputs) << a.name;
    for (std::size_t k = 0; k < a.samples.size(); ++k) {
      EXPECT_EQ(b.samples[k].kept_bytes, a.samples[k].kept_bytes) << a.name;
      EXPECT_EQ(b.samples[k].output_bytes, a.samples[k].output_bytes) << a.name;
      EXPECT_EQ(b.samples[k].fwd_transient_bytes, a.samples[k].fwd_transient_bytes) << a.name;
      EXPECT_EQ(b.samples[k].bwd_transient_bytes, a.samples[k].bwd_transient_bytes) << a.name;
    }
  }
  for (std::size_t k = 0; k < by_layer.steps.size(); ++k) EXPECT_EQ(run_whole.steps[k].peak_bytes, by_layer.steps[k].peak_bytes);
  // It cannot be built again from the trace: its plans run in the user's loop.
  try {
    models::build_model(run_whole.model, 0);
    ADD_FAILURE() << "an eager capture was rebuilt";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("run its plans in your own training loop with headroom.apply"), std::string::npos);
  }
  options.precision = core::Precision::Bf16Autocast;
  EXPECT_THROW(profiler::check_profile_options(whole, options), core::InputError);
}

}  // namespace
}  // namespace headroom
