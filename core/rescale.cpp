#include "core/rescale.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/statistics.h"

namespace headroom::core {

namespace {

std::int64_t scaled(std::int64_t ns, double factor) {
  return std::clamp<std::int64_t>(std::llround(static_cast<double>(ns) * factor), 0, kMaxTraceNs);
}

// The bytes a layer sample must at least move: what it reads and writes in forward, and about
// twice that in backward (the saved tensors and the output's gradient in, the inputs' gradients
// out).
std::int64_t moved_bytes(const Trace& trace, const LayerProfile& layer, std::size_t k, const LayerSample& sample) {
  std::int64_t in = 0;
  bool batch_read = false;
  for (const int input : layer.inputs) {
    // The batch's inputs at most the batch, however many of them the layer reads.
    if (is_model_input(input) && !batch_read) in += trace.steps[k].input_bytes;
    batch_read = batch_read || is_model_input(input);
    if (input >= 0) in += trace.layers[static_cast<std::size_t>(input)].samples[k].output_bytes;
  }
  return 3 * (in + sample.output_bytes);
}

// The compute-bound share of a layer moves with what its kind computes: a matrix product's with the
// calibration's product; any other's (a convolution, elementwise work, a composite module) with the
// geometric mean of the product and the convolution. Not a convolution's with the calibration's
// convolution: a machine can run that ResNet-stage convolution much slower than the committed
// traces' machine while the zoo cnn's small convolutions run about as fast, and the convolution
// alone then mispredicts the cnn's step where the mean does not (docs/design.md, "Time on the
// machine at hand"; docs/results.md, "Which kernel a layer's time follows").
double compute_ratio_of(const std::string& kind, const SpeedRatio& ratio) {
  if (is_matrix_product_kind(kind)) return ratio.matmul.value_or(ratio.compute);
  return ratio.compute;
}

// Rescales one sample in place; returns its time before and after.
std::pair<double, double> rescale_sample(const Trace& trace, const LayerProfile& layer, std::size_t k, LayerSample& s,
                                         const SpeedRatio& ratio, double bandwidth) {
  const double before = static_cast<double>(s.fwd_ns + s.bwd_ns);
  const double m = memory_share(moved_bytes(trace, layer, k, s), s.fwd_ns + s.bwd_ns, bandwidth);
  const double factor = m * ratio.memory + (1 - m) * compute_ratio_of(layer.kind, ratio);
  s.fwd_ns = scaled(s.fwd_ns, factor);
  s.bwd_ns = scaled(s.bwd_ns, factor);
  if (s.gpu) {
    s.gpu->fwd_kernel_ns = scaled(s.gpu->fwd_kernel_ns, factor);
    s.gpu->fwd_kernel_span_ns = scaled(s.gpu->fwd_kernel_span_ns, factor);
    s.gpu->bwd_kernel_ns = scaled(s.gpu->bwd_kernel_ns, factor);
    s.gpu->bwd_kernel_span_ns = scaled(s.gpu->bwd_kernel_span_ns, factor);
  }
  return {before, static_cast<double>(s.fwd_ns + s.bwd_ns)};
}

// A step's parts: its micro-batch work as its layers' work scaled, the optimizer's and zeroing's as
// memory-bound work.
void rescale_step(StepSample& step, double layers, const SpeedRatio& ratio) {
  const std::int64_t optimizer = step.optimizer_ns;
  step.optimizer_ns = scaled(optimizer, ratio.memory);
  step.step_ns = scaled(std::max<std::int64_t>(step.step_ns - optimizer, 0), layers) + step.optimizer_ns;
  step.plain_step_ns = scaled(std::max<std::int64_t>(step.plain_step_ns - optimizer, 0), layers) + step.optimizer_ns;
  if (step.sequence) {
    step.sequence->micro_batch_ns = scaled(step.sequence->micro_batch_ns, layers);
    step.sequence->first_micro_batch_ns = scaled(step.sequence->first_micro_batch_ns, layers);
    step.sequence->zero_grad_ns = scaled(step.sequence->zero_grad_ns, ratio.memory);
  }
  if (step.gpu) {
    step.gpu->kernel_ns = scaled(step.gpu->kernel_ns, layers);
    step.gpu->unattributed_kernel_ns = scaled(step.gpu->unattributed_kernel_ns, layers);
  }
}

}  // namespace

Trace rescaled(const Trace& trace, const SpeedRatio& ratio, const Calibration& here) {
  if (!trace.calibration) throw std::logic_error("rescaled: the trace has no calibration");
  const double bandwidth = trace.calibration->memory();
  Trace out = trace;
  const std::size_t samples = trace.batch_sizes.size();
  std::vector<double> before(samples, 0), after(samples, 0), tempo_before(samples, 0), tempo_after(samples, 0);
  for (std::size_t i = 0; i < out.layers.size(); ++i) {
    auto& layer = out.layers[i];
    for (std::size_t k = 0; k < samples; ++k) {
      // The bytes come from the unscaled trace (they do not change); only times are rescaled.
      const auto [b, a] = rescale_sample(trace, trace.layers[i], k, layer.samples[k], ratio, bandwidth);
      before[k] += b;
      after[k] += a;
      if (!layer.tempo) {
        tempo_before[k] += b;
        tempo_after[k] += a;
        continue;
      }
      const auto [lb, la] = rescale_sample(trace, trace.layers[i], k, layer.tempo->samples[k], ratio, bandwidth);
      tempo_before[k] += lb;
      tempo_after[k] += la;
    }
  }
  const auto factor = [](double b, double a) { return b > 0 ? a / b : 1.0; };
  for (std::size_t k = 0; k < out.steps.size(); ++k) rescale_step(out.steps[k], factor(before[k], after[k]), ratio);
  for (std::size_t k = 0; k < out.tempo_steps.size(); ++k) {
    rescale_step(out.tempo_steps[k], factor(tempo_before[k], tempo_after[k]), ratio);
  }
  if (out.contrastive_loss) {
    // Similarity products, tile by tile: compute-bound matrix products.
    const double products = ratio.matmul.value_or(ratio.compute);
    for (auto& s : out.contrastive_loss->samples) {
      s.fwd_ns = scaled(s.fwd_ns, products);
      s.bwd_ns = scaled(s.bwd_ns, products);
    }
  }
  if (!out.device.is_cuda()) {
    // A CPU's copy link is a memcpy: memory-bound work, its bytes taking `ratio.memory` times as
    // long here. (A GPU's crosses PCIe or NVLink, which no host calibration times.)
    out.device.host_to_device_bytes_per_s /= ratio.memory;
    out.device.device_to_host_bytes_per_s /= ratio.memory;
  }
  out.calibration = here;
  return out;
}

namespace {

TimesHere times_here_alone(const Trace& trace, const std::optional<Calibration>& here, bool rescale) {
  TimesHere out{std::nullopt, trace.calibration, ""};
  if (!trace.calibration) {
    out.note = "the trace has no calibration (recorded before headroom timed machines): its times are " + trace.device.name +
               "'s at " + std::to_string(trace.profile.threads) + " thread(s), unchecked against this machine";
    return out;
  }
  if (!here) {
    out.note = "no " + trace.device.kind + " device here to time against the trace's " + trace.device.name + ": its times are that device's";
    return out;
  }
  const SpeedRatio ratio = speed_ratio(*trace.calibration, *here);
  if (!ratio.differs) return out;
  out.note = describe_speed(ratio, *trace.calibration, *here);
  if (!rescale) {
    out.note += "; times kept as the trace's (--no-rescale)";
    return out;
  }
  out.rescaled = rescaled(trace, ratio, *here);
  out.calibration = here;
  out.note += "; times rescaled to this machine (--no-rescale keeps the trace's)";
  return out;
}

}  // namespace

TimesHere times_here(const Trace& trace, const std::optional<Calibration>& here, bool rescale) {
  TimesHere out = times_here_alone(trace, here, rescale);
  if (trace.other_precisions.empty() || !rescale) return out;
  // The trace's other precisions were profiled (and timed) apart: each is rescaled by its own
  // calibration, so a comparison of them holds for this machine as the chosen one does.
  Trace whole = out.rescaled ? std::move(*out.rescaled) : trace;
  bool changed = out.rescaled.has_value();
  for (auto& other : whole.other_precisions) {
    TimesHere moved = times_here_alone(other, here, true);
    if (moved.rescaled) {
      other = std::move(*moved.rescaled);
      changed = true;
    }
  }
  if (changed) out.rescaled = std::move(whole);
  return out;
}

Trace times_as_planned(const Trace& trace, const std::optional<Calibration>& plan_calibration) {
  if (!trace.calibration || !plan_calibration || *plan_calibration == *trace.calibration) return trace;
  return rescaled(trace, speed_ratio(*trace.calibration, *plan_calibration), *plan_calibration);
}

bool is_matrix_product_kind(std::string_view kind) {
  return kind == "linear" || kind == "attention" || kind == "pooler" || kind == "contrastive_loss";
}

std::optional<double> step_seconds_on(const Plan& plan, const SpeedRatio& ratio) {
  const auto compute = plan.predicted_part(kComputeBoundSecondsPart);
  const auto memory = plan.predicted_part(kMemoryBoundSecondsPart);
  if (!compute || !memory) return std::nullopt;
  // A plan whose compute part covers the products too has none of theirs.
  const double matmul = plan.predicted_part(kMatmulBoundSecondsPart).value_or(0);
  // What scales with none of them (a GPU's link, an all-reduce over the given link) stays as it is.
  return std::max(plan.predicted.step_seconds + *compute * (ratio.compute - 1) + *memory * (ratio.memory - 1) +
                      matmul * (ratio.matmul.value_or(ratio.compute) - 1),
                  0.0);
}

// Where this machine (timed right before the run and right after it) runs the calibration's kernels
// at another speed than the one the plan's times hold for, the prediction moved to it by the plan's
// own time by class of work, so everything else the plan counted stays as it was. The machine's
// speed is the better of the two timings, kernel by kernel, as one run (another load only slows a
// timing down: a stall one of them caught is not the machine's speed; as one run it adds no spread
// of its own to the noise the rescale must clear).
void predict_for_the_run(const Plan& plan, Report& report) {
  if (!report.calibration_before || !report.predicted_calibration) return;
  const Calibration planned_on = *report.predicted_calibration;
  Calibration here = *report.calibration_before;
  here.runs = {{here.matmul(), here.conv(), here.memory()}};
  if (const auto& after = report.calibration_after) {
    auto& best = here.runs.front();
    best = {std::max(best.matmul_flops_per_s, after->matmul()), std::max(best.conv_flops_per_s, after->conv()),
            std::max(best.memory_bytes_per_s, after->memory())};
  }
  const SpeedRatio ratio = speed_ratio(planned_on, here);
  if (!ratio.differs) return;
  const std::optional<double> step_seconds = step_seconds_on(plan, ratio);
  if (!step_seconds || !(*step_seconds > 0) || !(plan.predicted.step_seconds > 0)) {
    report.warnings.push_back(describe_speed(ratio, planned_on, here) +
                              "; the plan does not split its time by class of work (made by an older headroom): its "
                              "prediction is left as it is (plan again to have it moved to this machine)");
    return;
  }
  const double factor = *step_seconds / plan.predicted.step_seconds;
  char line[256];
  std::snprintf(line, sizeof line, "; the predicted times are rescaled to it (x%.2f; the plan predicted %.4f s a step)", factor,
                report.predicted.step_seconds);
  report.warnings.push_back(describe_speed(ratio, planned_on, here) + line);
  report.predicted.step_seconds *= factor;
  report.predicted.samples_per_second /= factor;
  report.predicted_calibration = here;
  report.throughput_rel_error = relative_error(report.predicted.samples_per_second, report.measured.samples_per_second);
}

}  // namespace headroom::core
