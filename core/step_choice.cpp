#include "core/step_choice.h"

#include <algorithm>
#include <array>
#include <utility>

namespace headroom::core {

std::string_view variant_name(LayerVariant variant) {
  for (const auto& [v, name] : kVariantNames) {
    if (v == variant) return name;
  }
  return "?";
}

std::optional<LayerVariant> variant_named(std::string_view name) {
  for (const auto& [v, n] : kVariantNames) {
    if (n == name) return v;
  }
  return std::nullopt;
}

std::string variant_names() {
  std::string out;
  for (std::size_t i = 0; i < kVariantNames.size(); ++i) {
    if (i > 0) out += i + 1 == kVariantNames.size() ? " or " : ", ";
    out += kVariantNames[i].second;
  }
  return out;
}

std::int64_t StepChoice::samples() const {
  std::int64_t total = 0;
  for (const auto b : micro_batches) total += b;
  return total;
}

std::size_t StepChoice::first_micro_batch(int rank) const {
  if (!data_parallel) return 0;
  const auto& per_worker = data_parallel->micro_batches_per_worker;
  std::size_t first = 0;
  for (int r = 0; r < rank && static_cast<std::size_t>(r) < per_worker.size(); ++r) {
    first += static_cast<std::size_t>(per_worker[static_cast<std::size_t>(r)]);
  }
  return first;
}

std::vector<std::int64_t> StepChoice::worker_micro_batches(int rank) const {
  if (!data_parallel || data_parallel->micro_batches_per_worker.empty()) return micro_batches;
  const auto& micro_batches_per_worker = data_parallel->micro_batches_per_worker;
  const std::size_t first = std::min(first_micro_batch(rank), micro_batches.size());
  const auto count = static_cast<std::size_t>(micro_batches_per_worker.at(static_cast<std::size_t>(rank)));
  const std::size_t end = std::min(first + count, micro_batches.size());
  return {micro_batches.begin() + static_cast<std::ptrdiff_t>(first), micro_batches.begin() + static_cast<std::ptrdiff_t>(end)};
}

int StepChoice::tempo_count() const {
  return static_cast<int>(
      std::count_if(layers.begin(), layers.end(), [](const LayerStep& l) { return l.variant == LayerVariant::Tempo; }));
}

void StepChoice::set_variant(int layer, LayerVariant v) {
  const auto i = static_cast<std::size_t>(layer);
  while (layers.size() <= i) layers.push_back({static_cast<int>(layers.size()), {}, false, LayerVariant::Standard});
  layers[i].variant = v;
}

}  // namespace headroom::core
