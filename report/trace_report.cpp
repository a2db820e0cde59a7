#include "report/trace_report.h"

#include <algorithm>
#include <cstdio>

#include "core/affine_fit.h"
#include "core/cost_model.h"
#include "core/host_memory.h"
#include "core/units.h"
#include "planner/layer_graph.h"
#include "planner/step_sequence.h"
#include "report/text_table.h"

namespace headroom::report {

namespace {

std::string ms(std::int64_t ns) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3f", static_cast<double>(ns) / 1e6);
  return buffer;
}

std::string bytes_or_dash(double bytes) {
  return bytes < 0.5 ? "-" : core::format_bytes(static_cast<std::int64_t>(bytes + 0.5));
}

}  // namespace

std::string render_layer_table(const core::Trace& trace) {
  using Align = TextTable::Align;
  const std::size_t last = trace.batch_sizes.size() - 1;
  const std::string at_b = "@" + std::to_string(trace.batch_sizes[last]);
  TextTable table({{"#"},
                   {"layer", Align::Left},
                   {"kind", Align::Left},
                   {"params"},
                   {"kept/sample"},
                   {"kept" + at_b},
                   {"fwd ms" + at_b},
                   {"bwd ms" + at_b}});
  std::int64_t params = 0, kept = 0, fwd = 0, bwd = 0;
  double kept_per_sample = 0;
  for (const auto& layer : trace.layers) {
    std::vector<std::int64_t> kept_bytes;
    for (const auto& s : layer.samples) kept_bytes.push_back(s.kept_bytes);
    const auto fit = core::fit_affine(trace.batch_sizes, kept_bytes);
    const auto& s = layer.samples[last];
    table.add_row({std::to_string(layer.id), layer.name, layer.kind, bytes_or_dash(static_cast<double>(layer.param_bytes)),
                   bytes_or_dash(fit.slope), bytes_or_dash(static_cast<double>(s.kept_bytes)), ms(s.fwd_ns),
                   ms(s.bwd_ns)});
    params += layer.param_bytes;
    kept += s.kept_bytes;
    kept_per_sample += fit.slope;
    fwd += s.fwd_ns;
    bwd += s.bwd_ns;
  }
  table.add_rule();
  table.add_row({"", "total", "", bytes_or_dash(static_cast<double>(params)), bytes_or_dash(kept_per_sample),
                 bytes_or_dash(static_cast<double>(kept)), ms(fwd), ms(bwd)});
  return table.render();
}

namespace {

// Kernel time as a share of wall time: near 100% the layer keeps the GPU busy, far below it the
// launches (CPU) dominate.
std::string share(std::int64_t part, std::int64_t whole) {
  if (whole <= 0) return "-";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.0f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return buffer;
}

}  // namespace

std::string describe_copy_link(const core::DeviceInfo& device) {
  if (device.host_to_device_bytes_per_s <= 0) return "";
  const auto one = [](double bytes_per_s, std::int64_t latency_ns) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f GB/s", bytes_per_s / 1e9);
    // Traces from before the latency was measured have none to show.
    return std::string(text) + (latency_ns > 0 ? " + " + core::format_duration_ns(latency_ns) + " each" : "");
  };
  return std::string(device.is_cuda() ? "pinned copies" : "copies") + " host->device " +
         one(device.host_to_device_bytes_per_s, device.host_to_device_latency_ns) + ", device->host " +
         one(device.device_to_host_bytes_per_s, device.device_to_host_latency_ns);
}

std::string describe_calibration(const core::Calibration& c) {
  char text[256];
  std::snprintf(text, sizeof text,
                "calibration at %d thread(s): matrix product %.1f GFLOP/s, convolution %.1f GFLOP/s, memory %.1f GB/s (%zu run%s, spread %.0f%%)",
                c.threads, c.matmul() / 1e9, c.conv() / 1e9, c.memory() / 1e9, c.runs.size(), c.runs.size() == 1 ? "" : "s",
                100 * c.spread());
  return text;
}

std::string render_gpu_table(const core::Trace& trace) {
  if (!trace.device.is_cuda()) return "";
  const std::size_t last = trace.batch_sizes.size() - 1;
  char device[512];
  std::snprintf(device, sizeof device, "%s: %s, %d SMs, %s\n", trace.device.name.c_str(),
                core::format_bytes(trace.device.total_memory_bytes).c_str(), trace.device.sm_count,
                describe_copy_link(trace.device).c_str());
  using Align = TextTable::Align;
  const std::string at_b = "@" + std::to_string(trace.batch_sizes[last]);
  TextTable table({{"#"},
                   {"layer", Align::Left},
                   {"fwd wall ms"},
                   {"fwd kernel ms"},
                   {"busy"},
                   {"kernels"},
                   {"bwd wall ms"},
                   {"bwd kernel ms"},
                   {"busy"},
                   {"kernels"},
                   {"reserved" + at_b}});
  std::int64_t fwd_wall = 0, fwd_kernel = 0, bwd_wall = 0, bwd_kernel = 0, fwd_count = 0, bwd_count = 0;
  for (const auto& layer : trace.layers) {
    const auto& s = layer.samples[last];
    if (!s.gpu) continue;
    const core::GpuLayerCost& g = *s.gpu;
    table.add_row({std::to_string(layer.id), layer.name, ms(s.fwd_ns), ms(g.fwd_kernel_ns), share(g.fwd_kernel_ns, s.fwd_ns),
                   std::to_string(g.fwd_kernels), ms(s.bwd_ns), ms(g.bwd_kernel_ns), share(g.bwd_kernel_ns, s.bwd_ns),
                   std::to_string(g.bwd_kernels),
                   core::format_bytes(std::max(g.fwd_reserved_bytes, g.bwd_reserved_bytes))});
    fwd_wall += s.fwd_ns;
    fwd_kernel += g.fwd_kernel_ns;
    bwd_wall += s.bwd_ns;
    bwd_kernel += g.bwd_kernel_ns;
    fwd_count += g.fwd_kernels;
    bwd_count += g.bwd_kernels;
  }
  table.add_rule();
  table.add_row({"", "total", ms(fwd_wall), ms(fwd_kernel), share(fwd_kernel, fwd_wall), std::to_string(fwd_count),
                 ms(bwd_wall), ms(bwd_kernel), share(bwd_kernel, bwd_wall), std::to_string(bwd_count), ""});

  TextTable steps({{"batch"}, {"kernel ms"}, {"unattributed ms"}, {"peak allocated"}, {"peak reserved"}, {"cudaMalloc"}});
  for (const auto& s : trace.steps) {
    if (!s.gpu) continue;
    steps.add_row({std::to_string(s.batch), ms(s.gpu->kernel_ns), ms(s.gpu->unattributed_kernel_ns),
                   core::format_bytes(s.peak_bytes), core::format_bytes(s.gpu->peak_reserved_bytes),
                   core::format_bytes(s.gpu->device_malloc_bytes)});
  }
  return std::string(device) + "\n" + table.render() + "\n" + steps.render();
}

std::string render_step_table(const core::Trace& trace) {
  const bool sequences = !trace.steps.empty() && trace.steps.front().sequence.has_value();
  std::vector<TextTable::Column> columns{{"batch"}, {"step ms"}, {"plain ms"}, {"overhead"}, {"optimizer ms"}};
  if (sequences) {
    // How a step of several micro-batches spends its time (StepSequence).
    for (const char* name : {"micro-batch ms", "first ms", "zero-grad ms"}) columns.push_back({name});
  }
  for (const char* name : {"peak", "static", "samples/s"}) columns.push_back({name});
  TextTable table(columns);
  for (const auto& s : trace.steps) {
    char overhead[32], rate[32];
    std::snprintf(overhead, sizeof overhead, "%.2fx",
                  s.plain_step_ns > 0 ? static_cast<double>(s.step_ns) / static_cast<double>(s.plain_step_ns) : 0.0);
    std::snprintf(rate, sizeof rate, "%.1f",
                  s.plain_step_ns > 0 ? static_cast<double>(s.batch) * 1e9 / static_cast<double>(s.plain_step_ns) : 0.0);
    std::vector<std::string> row{std::to_string(s.batch), ms(s.step_ns), ms(s.plain_step_ns), overhead, ms(s.optimizer_ns)};
    if (sequences) {
      row.push_back(ms(s.sequence->micro_batch_ns));
      row.push_back(ms(s.sequence->first_micro_batch_ns));
      row.push_back(ms(s.sequence->zero_grad_ns));
    }
    for (auto cell : {core::format_bytes(s.peak_bytes), core::format_bytes(s.static_bytes), std::string(rate)}) row.push_back(cell);
    table.add_row(row);
  }
  return "host-memory regime: " + (trace.host_memory_regime.empty() ? std::string(core::kUnrecordedRegime) : trace.host_memory_regime) +
         "\n" + table.render();
}

std::string render_tempo_table(const core::Trace& trace) {
  if (!trace.has_tempo()) return "";
  const std::int64_t b = trace.batch_sizes.back();
  const core::CostModel costs(trace);
  const planner::LayerGraph graph(trace);
  const planner::BatchCosts at_b = planner::batch_costs(costs, b);
  struct Kind {
    std::string name;
    int layers = 0;
    std::int64_t saved = 0, standard_ns = 0, tempo_ns = 0;
  };
  std::vector<Kind> kinds;
  Kind total{"total"};
  for (const int i : graph.tempo_candidates()) {
    const auto& layer = trace.layers[static_cast<std::size_t>(i)];
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const Kind& k) { return k.name == layer.kind; });
    if (it == kinds.end()) it = kinds.insert(kinds.end(), Kind{layer.kind});
    const auto& standard = at_b.layers[static_cast<std::size_t>(i)];
    const auto& tempo = at_b.tempo[static_cast<std::size_t>(i)];
    for (Kind* k : {&*it, &total}) {
      k->layers += 1;
      k->saved += planner::tempo_saved_bytes(at_b, graph, i);
      k->standard_ns += standard.fwd_ns + standard.bwd_ns;
      k->tempo_ns += tempo.fwd_ns + tempo.bwd_ns;
    }
  }
  const auto change = [](double now, double before) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%+.1f%%", before > 0 ? 100.0 * (now - before) / before : 0.0);
    return std::string(buffer);
  };
  const std::string at = "@" + std::to_string(b);
  TextTable layers({{"Tempo kind", TextTable::Align::Left}, {"layers"}, {"kept less" + at}, {"std ms" + at},
                    {"Tempo ms" + at}, {"time"}});
  kinds.push_back(total);
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    const Kind& kind = kinds[k];
    if (k + 1 == kinds.size()) layers.add_rule();
    layers.add_row({kind.name, std::to_string(kind.layers), bytes_or_dash(static_cast<double>(kind.saved)),
                    ms(kind.standard_ns), ms(kind.tempo_ns),
                    change(static_cast<double>(kind.tempo_ns), static_cast<double>(kind.standard_ns))});
  }
  TextTable steps({{"batch"}, {"peak"}, {"Tempo peak"}, {"peak"}, {"plain ms"}, {"Tempo plain ms"}, {"time"}});
  for (std::size_t k = 0; k < trace.steps.size(); ++k) {
    const auto& s = trace.steps[k];
    const auto& l = trace.tempo_steps[k];
    steps.add_row({std::to_string(s.batch), core::format_bytes(s.peak_bytes), core::format_bytes(l.peak_bytes),
                   change(static_cast<double>(l.peak_bytes), static_cast<double>(s.peak_bytes)), ms(s.plain_step_ns),
                   ms(l.plain_step_ns), change(static_cast<double>(l.plain_step_ns), static_cast<double>(s.plain_step_ns))});
  }
  return layers.render() + "\n" + steps.render();
}

}  // namespace headroom::report
