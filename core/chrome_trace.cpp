#include "core/chrome_trace.h"

#include "core/errors.h"

namespace headroom::core {

namespace {
double to_us(std::int64_t ns) { return static_cast<double>(ns) / 1000.0; }
}  // namespace

void ChromeTrace::name_process(int pid, const std::string& name) {
  events_.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", name}}}});
}

void ChromeTrace::name_thread(int pid, int tid, const std::string& name) {
  events_.push_back(
      {{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
}

void ChromeTrace::add_span(int pid, int tid, const std::string& name, const std::string& category,
                           std::int64_t start_ns, std::int64_t duration_ns, nlohmann::json args) {
  events_.push_back({{"ph", "X"},
                     {"name", name},
                     {"cat", category},
                     {"pid", pid},
                     {"tid", tid},
                     {"ts", to_us(start_ns)},
                     {"dur", to_us(duration_ns)},
                     {"args", std::move(args)}});
}

void ChromeTrace::add_counter(int pid, const std::string& name, std::int64_t time_ns, nlohmann::json values) {
  events_.push_back({{"ph", "C"}, {"name", name}, {"pid", pid}, {"ts", to_us(time_ns)}, {"args", std::move(values)}});
}

nlohmann::json ChromeTrace::to_json() const {
  return {{"traceEvents", events_}, {"displayTimeUnit", "ms"}};
}

ChromeTrace profile_step_chrome(const Trace& trace, std::int64_t batch) {
  const int index = trace.batch_index(batch);
  if (index < 0) throw InputError("the trace has no samples at batch size " + std::to_string(batch));
  const StepSample& step = trace.steps[static_cast<std::size_t>(index)];

  ChromeTrace out;
  constexpr int kPid = 1, kComputeLane = 1;
  out.name_process(kPid, trace.model.name + " on " + trace.device.kind + ", batch " + std::to_string(batch));
  out.name_thread(kPid, kComputeLane, "compute");

  const std::int64_t base = step.static_bytes + trace.workspace_bytes + step.input_bytes;
  std::int64_t now = 0, kept = 0;
  out.add_counter(kPid, "memory", now, {{"allocated_bytes", base}});
  for (const auto& layer : trace.layers) {
    const LayerSample& s = layer.samples[static_cast<std::size_t>(index)];
    out.add_span(kPid, kComputeLane, layer.name, "forward", now, s.fwd_ns,
                 {{"kind", layer.kind}, {"kept_bytes", s.kept_bytes}, {"fwd_transient_bytes", s.fwd_transient_bytes}});
    out.add_counter(kPid, "memory", now, {{"allocated_bytes", base + kept + s.fwd_transient_bytes}});
    now += s.fwd_ns;
    kept += s.kept_bytes;
    out.add_counter(kPid, "memory", now, {{"allocated_bytes", base + kept}});
  }
  for (auto it = trace.layers.rbegin(); it != trace.layers.rend(); ++it) {
    const LayerSample& s = it->samples[static_cast<std::size_t>(index)];
    out.add_span(kPid, kComputeLane, it->name, "backward", now, s.bwd_ns,
                 {{"kind", it->kind}, {"bwd_transient_bytes", s.bwd_transient_bytes}});
    out.add_counter(kPid, "memory", now, {{"allocated_bytes", base + kept + s.bwd_transient_bytes}});
    now += s.bwd_ns;
    kept -= s.kept_bytes;
    out.add_counter(kPid, "memory", now, {{"allocated_bytes", base + kept}});
  }
  out.add_span(kPid, kComputeLane, "optimizer." + trace.optimizer.name, "optimizer", now, step.optimizer_ns,
               {{"optimizer_transient_bytes", step.optimizer_transient_bytes}});
  out.add_counter(kPid, "memory", now, {{"allocated_bytes", base + step.optimizer_transient_bytes}});
  now += step.optimizer_ns;
  out.add_counter(kPid, "memory", now, {{"allocated_bytes", base}});
  return out;
}

nlohmann::json profile_step_timeline(const Trace& trace, std::int64_t batch) {
  return profile_step_chrome(trace, batch).to_json();
}

}  // namespace headroom::core
