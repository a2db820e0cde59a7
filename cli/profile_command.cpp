#include "cli/profile_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <string_view>
#include <utility>

#include "core/errors.h"
#include "core/freeze_patterns.h"
#include "core/optimizer_spec.h"
#include "core/trace_merge.h"
#include "models/model_source.h"
#include "models/torchscript_model.h"
#include "models/zoo.h"
#include "report/trace_report.h"
#include "runtime/calibration_cache.h"
#include "runtime/host_info.h"
#include "runtime/precision_support.h"

namespace headroom::cli {
namespace {

// Progress on stderr: one updating line on a terminal, a line per phase change otherwise.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(std::string label) : label_(std::move(label)), tty_(::isatty(STDERR_FILENO) != 0) {}

  void operator()(const profiler::Progress& p) {
    const std::string key = std::to_string(p.batch);
    if (!tty_ && key == last_key_ && p.step != p.total) return;
    last_key_ = key;
    std::fprintf(stderr, "%sprofiling %s  batch %-5lld %-8s [%3d/%3d]%s", tty_ ? "\r" : "", label_.c_str(),
                 static_cast<long long>(p.batch), p.phase.c_str(), p.step, p.total, tty_ ? "" : "\n");
    if (tty_ && p.step == p.total) std::fputc('\n', stderr);
    std::fflush(stderr);
  }
  // A line of its own, above the progress line.
  void note(const std::string& text) {
    if (text.empty()) return;
    std::fprintf(stderr, "%s%s\n", tty_ ? "\r\033[K" : "", text.c_str());
  }

 private:
  std::string label_;
  bool tty_;
  std::string last_key_;
};

std::map<std::string, std::string> parse_settings(const std::vector<std::string>& items) {
  std::map<std::string, std::string> settings;
  for (const auto& item : items) {
    auto [key, value] = models::parse_setting(item);
    settings[key] = value;
  }
  return settings;
}



// "1,2,4" as sizes. Every item must be a number: CLI11's own splitting skips empty ones ("1,,2").
std::vector<std::int64_t> parse_batch_sizes(const std::string& text) {
  std::vector<std::int64_t> sizes;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != ',') continue;
    const std::string item = text.substr(start, i - start);
    if (item.empty() || item.size() > 8 || item.find_first_not_of("0123456789") != std::string::npos) {
      throw core::InputError("batch_sizes: item " + std::to_string(sizes.size() + 1) + " of '" + text +
                             "' is not a batch size (expected positive integers separated by commas)");
    }
    sizes.push_back(std::stoll(item));
    start = i + 1;
  }
  return sizes;
}

std::map<std::string, std::string> torchscript_config(const ProfileArgs& args) {
  std::string inputs;
  for (const auto& input : args.inputs) inputs += (inputs.empty() ? "" : ",") + input;
  std::map<std::string, std::string> config{{"input", inputs}};
  if (!args.target.empty()) config["target"] = args.target;
  // cross-entropy takes its classes where PyTorch's does (dimension 1); cross-entropy-last where a
  // language model has them.
  if (args.loss == "cross-entropy-last") {
    config["loss"] = "cross-entropy";
    config["class_dim"] = "last";
  } else if (!args.loss.empty()) {
    config["loss"] = args.loss;
  }
  if (args.loss.empty() || args.loss == "cross-entropy") config["class_dim"] = "1";
  if (!args.layers.empty()) config["layers"] = args.layers;
  if (!args.depth.empty()) config["depth"] = args.depth;
  if (!args.output_index.empty()) config["output_index"] = args.output_index;
  return config;
}

// The loader names its config keys; here they were typed as flags.
models::Model load_torchscript(const ProfileArgs& args) {
  try {
    return models::load_torchscript_model(args.torchscript, torchscript_config(args), args.options.seed);
  } catch (const core::InputError& e) {
    const std::string message = e.what();
    for (std::string key : models::kTorchScriptKeys) {
      std::replace(key.begin(), key.end(), '_', '-');  // output_index is --output-index
      if (message.rfind(key + ": ", 0) == 0) throw core::InputError("--" + message);
    }
    throw;
  }
}

std::string one_decimal(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

// "fp32,bf16-autocast" as precisions, each once.
std::vector<core::Precision> parse_precisions(const std::string& text) {
  std::vector<core::Precision> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != ',') continue;
    const core::Precision precision = core::parse_precision(text.substr(start, i - start), "--precision");
    if (std::find(out.begin(), out.end(), precision) != out.end()) {
      throw core::InputError("--precision: " + std::string(core::precision_name(precision)) + " is named twice");
    }
    out.push_back(precision);
    start = i + 1;
  }
  return out;
}

}  // namespace

// A zoo model or a TorchScript file, and only the flags that go with the one given.
void check_model_flags(const ProfileArgs& args) {
  if (args.model.empty() == args.torchscript.empty()) {
    throw core::InputError("give either --model (a zoo model) or --torchscript (your own module), not " +
                           std::string(args.model.empty() ? "neither" : "both"));
  }
  if (!args.torchscript.empty() && !args.settings.empty()) {
    throw core::InputError("--set: size settings are for zoo models; a TorchScript module has its own sizes");
  }
  if (args.torchscript.empty()) {
    if (!args.inputs.empty()) throw core::InputError("--input: applies to --torchscript modules only");
    for (const auto& [flag, value] : {std::pair{"--target", &args.target}, {"--loss", &args.loss},
                                      {"--layers", &args.layers}, {"--depth", &args.depth},
                                      {"--output-index", &args.output_index}}) {
      if (!value->empty()) throw core::InputError(std::string(flag) + ": applies to --torchscript modules only");
    }
  } else if (args.inputs.empty()) {
    throw core::InputError("--input: give one sample's shape and dtype, e.g. --input 3x224x224:float32");
  }
}

namespace {

// --timing-seconds and --locate-steps, where given, over the options' own.
void apply_timing_flags(const ProfileArgs& args, profiler::ProfileOptions& options) {
  if (args.timing_seconds) options.timing_seconds = *args.timing_seconds;
  if (args.locate_steps) {
    options.locate_steps = *args.locate_steps;
    if (options.locate_steps < 0 || options.locate_steps > profiler::ProfileOptions::kMaxLocateSteps) {
      throw core::InputError("--locate-steps: expected 0 (none) to " + std::to_string(profiler::ProfileOptions::kMaxLocateSteps) +
                             " sizes more, got " + std::to_string(options.locate_steps));
    }
  }
}

// --add-to's trace, refused where it was profiled otherwise than asked; the options take its
// threads and timing where none were given.
core::Trace read_trace_to_add_to(const ProfileArgs& args, const std::vector<core::Precision>& precisions,
                                 profiler::ProfileOptions& options) {
  // The sizes added are the user's: a located one could be one the trace has.
  if (args.locate_steps && *args.locate_steps > 0) {
    throw core::InputError("--locate-steps: --add-to adds the sizes given and no others; profile them with --batch-sizes");
  }
  options.locate_steps = 0;
  core::Trace base = core::read_trace_file(args.add_to);
  if (base.precisions() != precisions) {
    std::string flag;
    for (const core::Precision p : base.precisions()) flag += (flag.empty() ? "" : ",") + std::string(core::precision_name(p));
    throw core::InputError("--add-to: " + args.add_to + " measured " + base.precision_list() + "; give --precision " +
                           flag + " as it was profiled");
  }
  if (core::parse_optimizer_spec(base.optimizer.name) != core::parse_optimizer_spec(options.optimizer)) {
    throw core::InputError("--add-to: " + args.add_to + " was profiled with --optimizer " + base.optimizer.name);
  }
  if (base.device.kind != options.device) {
    throw core::InputError("--add-to: " + args.add_to + " was profiled on " + base.device.kind);
  }
  core::expect_sizes_absent(base, options.batch_sizes);
  if (!args.chrome.empty()) {
    throw core::InputError("--chrome: draws a trace's largest batch size, which --add-to need not have profiled; "
                           "profile without --add-to for a timeline");
  }
  // At the trace's threads.
  if (options.threads == 0) options.threads = base.profile.threads;
  if (options.threads != base.profile.threads) {
    throw core::InputError("--add-to: " + args.add_to + " was profiled at " + std::to_string(base.profile.threads) +
                           (base.profile.threads == 1 ? " thread" : " threads") + "; leave --threads out or give " +
                           std::to_string(base.profile.threads));
  }
  // Timed for as long as the trace's sizes were, where it says how long.
  if (const auto& recorded = base.profile.timing_seconds) {
    if (!args.timing_seconds) options.timing_seconds = *recorded;
    if (options.timing_seconds != *recorded) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", *recorded);
      throw core::InputError("--add-to: " + args.add_to + " was timed with --timing-seconds " + seconds +
                             "; leave --timing-seconds out or give " + seconds);
    }
  }
  // The Tempo pass runs only for models with Tempo layers, so only a trace that has one can say.
  if (base.has_tempo() && !options.tempo) {
    throw core::InputError("--add-to: " + args.add_to + " has the Tempo pass; leave --no-tempo out");
  }
  return base;
}

// On the CPU without --threads, profiling runs on the idle cores only: a thread on a core another
// process keeps busy makes every parallel region wait on it, and the trace would record that
// process's share rather than this machine. Returns what to say about it, or nothing.
std::string use_idle_cores(profiler::ProfileOptions& options) {
  if (options.threads != 0 || options.device != "cpu") return "";
  const runtime::IdleCores cores = runtime::measure_idle_cores();
  options.threads = cores.idle;
  if (cores.idle >= cores.usable) return "";
  return "other processes keep " + one_decimal(cores.busy_with_others) + " of this process's " +
         std::to_string(cores.usable) + " cores busy: profiling at " + std::to_string(cores.idle) +
         (cores.idle == 1 ? " thread" : " threads") + ", as execute will run the step (--threads " +
         std::to_string(cores.usable) + " to use all of them)";
}

// The model profiled in each precision asked for, with `options` as they stand at each call: the
// first on the model built here, each later one on a model built afresh (float32 weights as seeded).
class PrecisionProfiles {
 public:
  PrecisionProfiles(const ProfileArgs& args, profiler::ProfileOptions& options)
      : args_(args), options_(options), model_(build()) {}

  // The model as built, for what is checked before anything is measured.
  const models::Model& model() const { return *model_; }
  // Said on stderr once profiling starts: a bad input is refused with its one line alone.
  void say_when_profiling_starts(std::string note) { note_ = std::move(note); }

  // `what`: after the model's name in the progress line.
  core::Trace measure(core::Precision precision, const std::string& what) {
    options_.precision = precision;
    if (!std::exchange(fresh_, false)) model_.emplace(build());
    ProgressPrinter printer(model_->name() + what);
    options_.on_progress = [&printer, this](const profiler::Progress& p) {
      if (!note_.empty()) std::cerr << std::exchange(note_, std::string()) << "\n";
      printer.note(p.note);
      printer(p);
    };
    return profiler::profile(*model_, options_);
  }

 private:
  models::Model build() const {
    models::Model model = args_.build_model            ? args_.build_model()
                          : args_.torchscript.empty() ? models::build_zoo_model(args_.model, parse_settings(args_.settings), args_.options.seed)
                                                      : load_torchscript(args_);
    model.freeze(args_.freeze.empty() ? std::vector<std::string>{} : core::parse_freeze_patterns(args_.freeze));
    if (!args_.capture.empty()) model.set_capture(args_.capture);
    return model;
  }

  const ProfileArgs& args_;
  profiler::ProfileOptions& options_;
  std::optional<models::Model> model_;
  bool fresh_ = true;  // the model built first has not trained yet
  std::string note_;
};

// One trace holds its precisions at the same sizes: each gets the sizes another located.
void join_located_sizes(std::vector<core::Trace>& measured, PrecisionProfiles& profiles, profiler::ProfileOptions& options) {
  std::vector<std::int64_t> all;
  for (const auto& t : measured) all.insert(all.end(), t.batch_sizes.begin(), t.batch_sizes.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  for (auto& t : measured) {
    std::vector<std::int64_t> missing;
    std::set_difference(all.begin(), all.end(), t.batch_sizes.begin(), t.batch_sizes.end(), std::back_inserter(missing));
    if (missing.empty()) continue;
    options.batch_sizes = missing;
    options.locate_steps = 0;
    const core::Trace more = profiles.measure(t.precision, " in " + std::string(core::precision_name(t.precision)) +
                                                               ", the sizes the other precisions located");
    try {
      t = core::with_batch_sizes_added(t, more);
    } catch (const core::InputError& e) {
      // Its message speaks of --add-to, which this run was not given.
      constexpr std::string_view kAddTo = "--add-to: ";
      std::string what = e.what();
      if (what.starts_with(kAddTo)) what.erase(0, kAddTo.size());
      throw core::InputError("--precision: the sizes one precision located (" + std::to_string(missing.front()) +
                             (missing.size() > 1 ? " and more" : "") + ") did not join the " +
                             std::string(core::precision_name(t.precision)) + " profile: " + what +
                             "; profile the precisions one at a time");
    }
  }
}

// Warns where other processes shared the CPU while profiling; else keeps the trace's calibration
// as this machine's newest timing.
void warn_or_keep_calibration(const core::Trace& trace, const profiler::ProfileOptions& options,
                              const runtime::CpuUsage& before) {
  const double others = runtime::cores_busy_with_others(before, runtime::cpu_usage_now());
  if (options.device == "cpu" && runtime::cores_taken(others) > 0) {
    std::cerr << "warning: other processes kept " << one_decimal(others) << " cores busy on average while "
              << "profiling: the trace's times were measured sharing the machine's caches and memory with them; "
              << "profile again on a quiet machine for its own\n";
  } else if (trace.calibration && !trace.device.is_cuda()) {
    // The newest timing of this machine at these threads: the plan made next compares the trace with
    // it rather than with an older cached one (a machine's speed wanders within minutes, docs/design.md,
    // "Time on the machine at hand": an hour-old cache would rescale a fresh trace to the machine as
    // it was then). Not where other processes shared the machine: that is not its speed. `execute`
    // times the machine again before and after its run either way.
    runtime::save_cached_calibration(*trace.calibration);
  }
}

}  // namespace

// `gpu_step` receives the last profiled step at the largest batch size when profiling on CUDA.
// Several precisions are profiled in turn, each on a model built afresh (float32 weights as seeded),
// into one trace: the first's, holding the others.
core::Trace run_profile(const ProfileArgs& args, std::optional<profiler::GpuStepRecord>& gpu_step) {
  profiler::ProfileOptions options = args.options;
  options.batch_sizes = parse_batch_sizes(args.batch_sizes);
  options.optimizer = core::optimizer_spec_from_flags(options.optimizer, args.momentum ? &*args.momentum : nullptr,
                                                      args.amsgrad).text();
  const std::vector<core::Precision> precisions = parse_precisions(args.precision);
  // The trace the sizes go into is read, and what can be compared before measuring is, first: a
  // mismatch costs no profiling.
  apply_timing_flags(args, options);
  std::optional<core::Trace> base;
  if (!args.add_to.empty()) base = read_trace_to_add_to(args, precisions, options);
  if (precisions.size() > 1 && options.device == "cuda") {
    // The caching allocator would keep the first precision's blocks reserved while the next is
    // measured, and the reserve is what a CUDA trace's device figures read.
    throw core::InputError("--precision: several precisions are profiled in one process on the CPU only; on cuda the "
                           "caching allocator keeps the first one's memory reserved: profile one precision at a time");
  }
  PrecisionProfiles profiles(args, options);
  if (base) core::expect_same_model(base->model, models::model_source(profiles.model()));
  // Every precision asked for is refused or accepted before the first is measured, and one the
  // CPU does not compute natively is said, with its price here.
  for (const core::Precision precision : precisions) {
    options.precision = precision;
    profiler::check_profile_options(profiles.model(), options);
    if (options.device == "cpu") {
      if (const std::string warning = runtime::cpu_precision_warning(precision); !warning.empty()) {
        std::cerr << "headroom: warning: " << warning << "\n";
      }
    }
  }
  profiles.say_when_profiling_starts(use_idle_cores(options));
  options.on_gpu_step = [&gpu_step, largest = options.batch_sizes.back()](std::int64_t batch,
                                                                          const profiler::GpuStepRecord& record) {
    if (batch == largest && !gpu_step) gpu_step = record;
  };
  const runtime::CpuUsage before = runtime::cpu_usage_now();
  std::vector<core::Trace> measured;
  for (const core::Precision precision : precisions) {
    measured.push_back(profiles.measure(precision, precisions.size() > 1 ? " in " + std::string(core::precision_name(precision)) : ""));
  }
  if (measured.size() > 1) join_located_sizes(measured, profiles, options);
  core::Trace trace(std::move(measured.front()));
  for (std::size_t k = 1; k < measured.size(); ++k) trace.other_precisions.push_back(std::move(measured[k]));
  warn_or_keep_calibration(trace, options, before);
  if (base) return core::with_batch_sizes_added(*base, trace);
  return trace;
}

// `name_precision`: say the precision even where it is fp32 (a trace of several).
std::string trace_summary(const core::Trace& trace, bool name_precision) {
  std::ostringstream out;
  out << trace.model.name << " on " << trace.device.name << ", optimizer " << trace.optimizer.name
            << ", torch " << trace.framework.at("torch") << ", " << trace.profile.threads
            << (trace.profile.threads == 1 ? " thread" : " threads")
            << (name_precision || trace.precision != core::Precision::Fp32 ? ", " + std::string(core::precision_name(trace.precision))
                                                                           : std::string())
            << "\n";
  if (!trace.device.is_cuda() && trace.device.host_to_device_bytes_per_s > 0) {
    out << report::describe_copy_link(trace.device) << " (L2L's memcpys, past the caches: what times L2L's copies)\n";
  }
  if (trace.calibration) {
    out << report::describe_calibration(*trace.calibration) << "\n";
    if (trace.calibration->spread() > core::kCalibrationTolerance) {
      out << "warning: the best of the calibrations taken while profiling was "
                << static_cast<int>(100 * trace.calibration->spread() + 0.5)
                << "% faster than their median: another load shared the machine for a stretch, and the trace's "
                   "times may not hold even here; profile again on a quiet machine"
          << (trace.profile.timing_seconds.value_or(0) < 10 ? ", or time its steps longer for steadier times (--timing-seconds 10)" : "")
          << "\n";
    }
  }
  out << "\n"
            << report::render_layer_table(trace) << "\n"
            << report::render_step_table(trace);
  if (trace.has_tempo()) out << "\nTempo: the same steps with every memory-lean layer on\n" << report::render_tempo_table(trace);
  if (trace.device.is_cuda()) out << "\nGPU (CUPTI)\n" << report::render_gpu_table(trace);
  return out.str();
}

}  // namespace headroom::cli
