// headroom._core: the C++ core as the Python package calls it (python/headroom/__init__.py). Each
// function is one the command line runs, so the package and `headroom` answer alike: profile as
// `headroom profile` (progress on stderr), plan as `headroom plan`, the summary tables they print,
// the budget allocator `headroom execute` enforces its budget with, and its report.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "cli/flag_names.h"
#include "cli/plan_commands.h"
#include "cli/profile_command.h"
#include "core/errors.h"
#include "core/host_memory.h"
#include "core/plan.h"
#include "core/report.h"
#include "core/trace.h"
#include "core/units.h"
#include "models/model.h"
#include "python/eager_capture.h"
#include "report/execution_report.h"
#include "report/plan_report.h"
#include "runtime/budget_allocator.h"
#include "runtime/calibration.h"
#include "runtime/host_info.h"
#include "runtime/intra_op_threads.h"

namespace py = pybind11;
using namespace headroom;

namespace {

// The process's threads (torch's and OpenBLAS's) as they were, again when it ends, however it ends:
// the user's own work goes on at the threads it had.
class KeepThreads {
 public:
  KeepThreads() : torch_(at::get_num_threads()), blas_(runtime::blas_threads()) {}
  ~KeepThreads() {
    runtime::use_threads(blas_ > 0 ? blas_ : torch_);
    at::set_num_threads(torch_);
  }
  KeepThreads(const KeepThreads&) = delete;
  KeepThreads& operator=(const KeepThreads&) = delete;

 private:
  int torch_;
  int blas_;
};

// A calibration of this machine at the trace's threads, for the plan to compare the trace's times
// with: the cache's (what `headroom calibrate` and a profile on a quiet machine leave), or measured
// here; none, with the reason, where other processes shared the cores while it was measured.
runtime::MachineTiming calibrate_here(const core::Trace& trace) {
  if (trace.device.is_cuda()) return {};
  const int threads = std::min(std::max(trace.profile.threads, 1), runtime::usable_cores());
  if (auto cached = runtime::read_cached_calibration(false, threads)) return {cached, ""};
  const KeepThreads keep;
  runtime::use_threads(threads);
  return runtime::cached_calibration(c10::Device(c10::kCPU));
}

// libtorch's errors carry a backtrace; the first line is the message.
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Errors as the command line words them: a library's field named as the flag that sets it (the
// package's keywords are the flags' names), libtorch's without its backtrace.
template <typename F>
auto as_the_cli_says(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const core::InputError& e) {
    throw core::InputError(cli::name_flag(e.what()));
  } catch (const c10::Error& e) {
    throw std::runtime_error(first_line(e.what_without_backtrace()));
  }
}

std::string run_profile(const cli::ProfileArgs& args);

// How the package profiles any module: the command line's settings, and the step's optimizer is
// torch.optim's.
cli::ProfileArgs profile_settings(const std::string& batch_sizes, const std::string& optimizer, const std::string& precision,
                                  int threads, int warmup, int repeats, double timing_seconds, std::uint64_t seed) {
  cli::ProfileArgs args;
  args.batch_sizes = batch_sizes;
  args.options.optimizer = optimizer;
  args.precision = precision;
  args.options.threads = threads;
  args.options.warmup_steps = warmup;
  args.options.repeats = repeats;
  args.timing_seconds = timing_seconds;
  args.options.seed = seed;
  args.options.torch_optim_state = true;
  return args;
}

std::string profile_trace(const std::string& torchscript, const std::vector<std::string>& inputs, const std::string& target,
                          const std::string& loss, const std::string& layers, const std::string& depth,
                          const std::string& output_index, const std::string& batch_sizes, const std::string& optimizer,
                          const std::string& precision, int threads, int warmup, int repeats, double timing_seconds,
                          std::uint64_t seed, bool tempo, const std::string& capture) {
  cli::ProfileArgs args = profile_settings(batch_sizes, optimizer, precision, threads, warmup, repeats, timing_seconds, seed);
  args.torchscript = torchscript;
  args.capture = capture;
  args.inputs = inputs;
  args.target = target;
  args.loss = loss;
  args.layers = layers;
  args.depth = depth;
  args.output_index = output_index;
  args.options.tempo = tempo;
  return as_the_cli_says([&] {
    cli::check_model_flags(args);
    return run_profile(args);
  });
}

// The trace's JSON, measured without the GIL: minutes of torch work while other Python threads go
// on (an eager capture's forward takes the GIL back while it runs).
std::string run_profile(const cli::ProfileArgs& args) {
  std::optional<profiler::GpuStepRecord> gpu_step;
  const KeepThreads keep;
  py::gil_scoped_release unlocked;
  return core::to_json(cli::run_profile(args, gpu_step)).dump(1) + "\n";
}

// A module captured in eager PyTorch (headroom._eager.EagerCapture), profiled as `profile_trace`
// profiles a TorchScript file.
std::string profile_eager(const py::object& capture, const std::string& batch_sizes, const std::string& optimizer,
                          const std::string& precision, int threads, int warmup, int repeats, double timing_seconds,
                          std::uint64_t seed) {
  cli::ProfileArgs args = profile_settings(batch_sizes, optimizer, precision, threads, warmup, repeats, timing_seconds, seed);
  args.build_model = [capture] {
    py::gil_scoped_acquire gil;  // called where the profile let the GIL go; passing `capture` counts a reference
    return python::build_eager_model(capture);
  };
  return as_the_cli_says([&] { return run_profile(args); });
}

void bind_profile(py::module_& m) {
  // The host-memory regime profile and execute run in (core/host_memory.h): freed pages stay with
  // the process, so a step's time does not include handing them back and taking them again.
  m.def("enter_host_memory_regime", [] { return core::enter_host_memory_regime(); });

  m.def("profile", &profile_trace, py::arg("torchscript"), py::arg("inputs"), py::arg("target"), py::arg("loss"),
        py::arg("layers"), py::arg("depth"), py::arg("output_index"), py::arg("batch_sizes"), py::arg("optimizer"),
        py::arg("precision"), py::arg("threads"), py::arg("warmup"), py::arg("repeats"), py::arg("timing_seconds"),
        py::arg("seed"), py::arg("tempo"), py::arg("capture"));
  m.def("profile_eager", &profile_eager, py::arg("capture"), py::arg("batch_sizes"), py::arg("optimizer"),
        py::arg("precision"), py::arg("threads"), py::arg("warmup"), py::arg("repeats"), py::arg("timing_seconds"),
        py::arg("seed"));
  python::bind_eager_capture(m);

  m.def("trace_summary", [](const std::string& trace_json, const std::string& source) {
    return as_the_cli_says([&] {
      const core::Trace trace = core::trace_from_json(nlohmann::json::parse(trace_json), source);
      const bool several = !trace.other_precisions.empty();
      std::string out = cli::trace_summary(trace, several);
      for (const auto& other : trace.other_precisions) out += "\n" + cli::trace_summary(other, several);
      return out;
    });
  });
}

// A plan as `headroom plan` makes it: (plan JSON, the summary it prints, what follows the summary).
py::tuple make_plan(const std::string& trace_path, const std::string& budget, std::int64_t batch, const std::string& strategies,
                    double margin, const std::string& optimizer, const std::string& precision, bool rescale) {
  cli::PlanArgs args;
  args.trace = trace_path;
  args.budget = budget;
  args.batch = batch;
  args.strategies = strategies;
  args.margin = margin;
  args.optimizer = optimizer;
  args.precision = precision;
  args.no_rescale = !rescale;
  args.calibrate_here = calibrate_here;
  return as_the_cli_says([&] {
    if (batch < 1) throw core::InputError("--batch: expected a positive global batch, got " + std::to_string(batch));
    std::string plan_json, summary, after;
    {
      py::gil_scoped_release unlocked;  // a calibration of this machine may run first
      cli::PlanMade made = cli::make_plan(args);
      plan_json = core::to_json(made.plan).dump(1) + "\n";
      summary = std::move(made.summary);
      after = made.after_summary();
    }
    return py::make_tuple(plan_json, summary, after);
  });
}

void bind_plan(py::module_& m) {
  m.def("plan", &make_plan, py::arg("trace_path"), py::arg("budget"), py::arg("batch"), py::arg("strategies"),
        py::arg("margin"), py::arg("optimizer"), py::arg("precision"), py::arg("rescale"));

  m.def("read_plan", [](const std::string& plan_json, const std::string& source) {
    return as_the_cli_says(
        [&] { return core::to_json(core::plan_from_json(nlohmann::json::parse(plan_json), source)).dump(1) + "\n"; });
  });
  m.def("plan_summary", [](const std::string& plan_json, const std::string& source) {
    return as_the_cli_says(
        [&] { return report::render_plan_summary(core::plan_from_json(nlohmann::json::parse(plan_json), source)); });
  });
}

// The budget allocator (runtime/budget_allocator.h), installed as libtorch's CPU allocator on
// first use: what torch allocates from then on is counted, and refused past the limit.
void bind_budget_allocator(py::module_& m) {
  m.def("allocator_install", [] { runtime::BudgetAllocator::instance(); });
  m.def("allocator_set_limit", [](std::int64_t bytes) { runtime::BudgetAllocator::instance().set_limit(bytes); });
  m.def("allocator_in_use", [] { return runtime::BudgetAllocator::instance().in_use(); });
  m.def("allocator_peak", [] { return runtime::BudgetAllocator::instance().peak(); });
  m.def("allocator_reset_peak", [] { runtime::BudgetAllocator::instance().reset_peak(); });
  // (requested, in use, limit) of the last allocation the budget refused on this thread, or None.
  m.def("allocator_last_refusal", []() -> std::optional<std::tuple<std::int64_t, std::int64_t, std::int64_t>> {
    const runtime::Refusal& r = runtime::BudgetAllocator::last_refusal();
    if (r.requested_bytes == 0) return std::nullopt;
    return std::make_tuple(r.requested_bytes, r.in_use_bytes, r.budget_bytes);
  });
  m.def("allocator_clear_refusal", [] { runtime::BudgetAllocator::clear_last_refusal(); });
  // Whether the allocator made this tensor's storage (made before it was installed: not counted).
  m.def("allocator_counts", [](const at::Tensor& t) {
    return t.storage().data_ptr().get_deleter() == runtime::BudgetAllocator::instance().raw_deleter();
  });
}

void bind_report(py::module_& m) {
  m.def("report_json", [](const std::string& report_json) {
    // Validated as `headroom compare` reads it.
    return as_the_cli_says([&] {
      return core::to_json(core::report_from_json(nlohmann::json::parse(report_json), "report")).dump(1) + "\n";
    });
  });
  m.def("render_report", [](const std::string& report_json) {
    return as_the_cli_says(
        [&] { return report::render_report(core::report_from_json(nlohmann::json::parse(report_json), "report")); });
  });
}

// The threads and units the package shares with the command line.
void bind_threads_and_units(py::module_& m) {
  m.def("blas_threads", [] { return runtime::blas_threads(); });
  m.def("format_bytes", [](std::int64_t bytes) { return core::format_bytes(bytes); });
  m.def("use_threads", [](int threads) { runtime::use_threads(threads); });
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "headroom's C++ core (use the headroom package, not this module)";
  py::register_exception<core::InputError>(m, "InputError", PyExc_ValueError);
  py::register_exception<cli::Infeasible>(m, "Infeasible", PyExc_RuntimeError);
  bind_profile(m);
  bind_plan(m);
  bind_budget_allocator(m);
  bind_report(m);
  bind_threads_and_units(m);
}
