#include "profiler/contrastive_loss_profiler.h"

#include <chrono>
#include <memory>
#include <stdexcept>

#include "core/statistics.h"
#include "runtime/memory_recorder.h"

namespace headroom::profiler {

namespace {

using Clock = std::chrono::steady_clock;
using Mode = models::ContrastiveLossSettings::Mode;

std::int64_t since_ns(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

void synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

torch::Tensor unit_rows(std::int64_t batch, std::int64_t dim, std::uint64_t seed, torch::Device device) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::Tensor x = torch::randn({batch, dim}, gen);
  return x.div_(x.norm(2, 1, true)).to(device);
}

// One sample: forward and backward of the loss layer's function on fresh leaves, as the executor
// runs it (the log-scale's gradient exists already and accumulates in place).
core::ContrastiveSample measure(const models::Layer& layer, std::int64_t dim, torch::Device device,
                                core::ContrastiveMode mode, std::int64_t batch, std::optional<core::LossTiles> tiles,
                                int repeats) {
  models::ContrastiveLossSettings settings;
  settings.mode = mode == core::ContrastiveMode::Surrogate ? Mode::Surrogate : Mode::Loss;
  settings.tiles = tiles;
  const torch::Tensor q0 = unit_rows(batch, dim, 1, device), k0 = unit_rows(batch, dim, 2, device);
  if (mode == core::ContrastiveMode::Surrogate) {
    settings.cached_q = unit_rows(batch, dim, 3, device);
    settings.cached_k = unit_rows(batch, dim, 4, device);
  }
  const torch::Tensor& log_scale = layer.parameters.at(0);
  if (!log_scale.grad().defined()) log_scale.mutable_grad() = torch::zeros_like(log_scale);
  core::ContrastiveSample out;
  out.mode = mode;
  out.batch = batch;
  if (tiles) {
    out.tile_rows = tiles->rows;
    out.tile_cols = tiles->cols;
  }
  std::vector<std::int64_t> fwd_ns, bwd_ns;
  for (int r = 0; r < repeats; ++r) {
    torch::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true);
    auto recorder = std::make_shared<runtime::MemoryRecorder>(device.type());
    runtime::ScopedMemoryRecording recording(recorder);
    recorder->mark();
    synchronize(device);
    auto start = Clock::now();
    torch::Tensor loss = models::run_contrastive_layer(q, k, log_scale, settings);
    synchronize(device);
    fwd_ns.push_back(since_ns(start));
    out.fwd_transient_bytes = recorder->peak_since_mark();
    out.fwd_retained_bytes = recorder->allocated();
    recorder->mark();
    const std::int64_t at_backward = recorder->allocated();
    start = Clock::now();
    loss.backward();
    synchronize(device);
    bwd_ns.push_back(since_ns(start));
    out.bwd_transient_bytes = recorder->peak_since_mark() - at_backward;
    out.bwd_retained_bytes = recorder->allocated() - at_backward;
  }
  log_scale.mutable_grad().zero_();
  out.fwd_ns = core::median(fwd_ns);
  out.bwd_ns = core::median(bwd_ns);
  return out;
}

}  // namespace

int contrastive_loss_layer(const models::Model& model) {
  for (std::size_t i = 0; i < model.layers().size(); ++i) {
    if (model.layers()[i].contrastive) return static_cast<int>(i);
  }
  return -1;
}

core::ContrastiveProfile profile_contrastive_loss(const models::Model& model, torch::Device device,
                                                  const ContrastiveProfileOptions& options) {
  const int id = contrastive_loss_layer(model);
  if (id < 0) throw std::invalid_argument("model " + model.name() + " has no contrastive loss layer");
  const models::Layer& layer = model.layers()[static_cast<std::size_t>(id)];
  core::ContrastiveProfile profile;
  profile.layer = id;
  {
    // The embedding width, from the first tower's output on a small batch.
    torch::NoGradGuard no_grad;
    const models::Batch probe = model.make_batch(2, 0);
    profile.dim = model.forward_to(probe.to(device), layer.inputs.at(0)).size(1);
  }
  const auto add = [&](core::ContrastiveMode mode, std::int64_t batch, std::optional<core::LossTiles> tiles) {
    // The first run warms the allocator's pools and lazy initialization.
    measure(layer, profile.dim, device, mode, batch, tiles, 1);
    profile.samples.push_back(measure(layer, profile.dim, device, mode, batch, tiles, options.repeats));
    if (options.on_sample) options.on_sample(batch);
  };
  for (const std::int64_t b : options.standard_batches) add(core::ContrastiveMode::Standard, b, std::nullopt);
  for (const auto& tiles : options.tiles) {
    for (const std::int64_t m : options.tile_batch_multiples) {
      add(core::ContrastiveMode::Tiled, m * std::max(tiles.rows, tiles.cols), tiles);
    }
  }
  for (const std::int64_t b : options.surrogate_batches) add(core::ContrastiveMode::Surrogate, b, std::nullopt);
  return profile;
}

}  // namespace headroom::profiler
