#pragma once
// `headroom profile`'s work, shared by headroom-torch and the Python package: a zoo model or a
// TorchScript file measured into a trace (every precision asked for), with progress on stderr, and
// the summary tables the command prints.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/trace.h"
#include "profiler/profiler.h"

namespace headroom::models {
class Model;
}

namespace headroom::cli {

struct ProfileArgs {
  std::string model;
  // A user's TorchScript module instead of a zoo model, and what it is run with.
  std::string torchscript;
  std::vector<std::string> inputs;  // one per input forward takes, in its order
  std::string target, loss, layers, depth, output_index;
  // From Python: how the module became the TorchScript file ("script" or "trace"), recorded in the trace.
  std::string capture;
  // From Python: a module captured in eager PyTorch, built by the package (python/eager_capture.h)
  // instead of from a zoo name or a file.
  std::function<models::Model()> build_model;
  std::string batch_sizes;  // as typed: "1,2,4"
  std::string precision = "fp32";
  std::vector<std::string> settings;
  // Parameters not to train (core/freeze_patterns.h), as typed: "layer1,layer2" or "*,!fc".
  std::string freeze;
  // The optimizer's settings beside options.optimizer (--momentum, --amsgrad; core/optimizer_spec.h).
  std::optional<double> momentum;
  bool amsgrad = false;
  profiler::ProfileOptions options;
  std::string output;
  std::string chrome;
  bool measure_link = false;
  // A trace to add the batch sizes to (core/trace_merge.h): the result is that trace with them.
  std::string add_to;
  // ProfileOptions::locate_steps as given (--locate-steps); unset: the default, none with --add-to.
  std::optional<int> locate_steps;
  // ProfileOptions::timing_seconds as given (--timing-seconds); unset: the default, the trace's own
  // with --add-to.
  std::optional<double> timing_seconds;
};

// A zoo model or a TorchScript file, and only the flags that go with the one given; throws
// core::InputError naming the flag.
void check_model_flags(const ProfileArgs& args);
// Measures the model into one trace, each precision on a model built afresh (the first's trace
// holding the others). `gpu_step` receives the last profiled step at the largest batch size on CUDA.
core::Trace run_profile(const ProfileArgs& args, std::optional<profiler::GpuStepRecord>& gpu_step);
// What `headroom profile` prints for a trace: the device line, calibration, layer and step tables.
// `name_precision`: say the precision even where it is fp32 (a trace of several).
std::string trace_summary(const core::Trace& trace, bool name_precision);

}  // namespace headroom::cli
