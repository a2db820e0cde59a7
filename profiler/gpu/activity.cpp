#include "profiler/gpu/activity.h"

#include <algorithm>
#include <limits>

namespace headroom::profiler::gpu {

std::string phase_name(Phase phase) {
  switch (phase) {
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Optimizer: return "optimizer";
  }
  return "?";
}

void ActivityLog::append(ActivityLog&& other) {
  kernels.insert(kernels.end(), std::make_move_iterator(other.kernels.begin()),
                 std::make_move_iterator(other.kernels.end()));
  copies.insert(copies.end(), other.copies.begin(), other.copies.end());
  memory.insert(memory.end(), other.memory.begin(), other.memory.end());
  external_ids.merge(other.external_ids);
  dropped_records += other.dropped_records;
}

std::uint64_t RangeTable::open(int layer, Phase phase) {
  ranges_.push_back({layer, phase});
  return ranges_.size();
}

const RangeTable::Range* RangeTable::find(std::uint64_t external_id) const {
  if (external_id == 0 || external_id > ranges_.size()) return nullptr;
  return &ranges_[external_id - 1];
}

namespace {

// Accumulates one (layer, phase)'s work; the span is closed once all activities are in.
struct WorkBuilder {
  GpuWork work;
  std::uint64_t first = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t last = 0;

  void add_interval(std::uint64_t start, std::uint64_t end) {
    first = std::min(first, start);
    last = std::max(last, end);
  }
  GpuWork finish() const {
    GpuWork w = work;
    w.span_ns = last > first ? static_cast<std::int64_t>(last - first) : 0;
    return w;
  }
};

std::int64_t duration(std::uint64_t start, std::uint64_t end) {
  return end > start ? static_cast<std::int64_t>(end - start) : 0;
}

}  // namespace

StepAttribution attribute(const ActivityLog& log, const RangeTable& ranges, std::size_t layer_count) {
  std::vector<WorkBuilder> forward(layer_count), backward(layer_count);
  WorkBuilder optimizer, unattributed;

  const auto builder_for = [&](std::uint32_t correlation_id) -> WorkBuilder& {
    const auto it = log.external_ids.find(correlation_id);
    const RangeTable::Range* range = it == log.external_ids.end() ? nullptr : ranges.find(it->second);
    if (range == nullptr) return unattributed;
    if (range->phase == Phase::Optimizer) return optimizer;
    if (range->layer < 0 || static_cast<std::size_t>(range->layer) >= layer_count) return unattributed;
    const auto layer = static_cast<std::size_t>(range->layer);
    return range->phase == Phase::Forward ? forward[layer] : backward[layer];
  };

  StepAttribution result;
  for (const auto& k : log.kernels) {
    WorkBuilder& b = builder_for(k.correlation_id);
    b.work.kernel_ns += duration(k.start_ns, k.end_ns);
    b.work.kernels += 1;
    b.add_interval(k.start_ns, k.end_ns);
    result.kernel_ns += duration(k.start_ns, k.end_ns);
  }
  for (const auto& c : log.copies) {
    WorkBuilder& b = builder_for(c.correlation_id);
    b.work.copy_ns += duration(c.start_ns, c.end_ns);
    b.work.copies += 1;
    b.add_interval(c.start_ns, c.end_ns);
  }
  for (const auto& m : log.memory) {
    if (!m.allocation) continue;
    builder_for(m.correlation_id).work.malloc_bytes += static_cast<std::int64_t>(m.bytes);
    result.malloc_bytes += static_cast<std::int64_t>(m.bytes);
  }

  result.forward.reserve(layer_count);
  result.backward.reserve(layer_count);
  for (std::size_t i = 0; i < layer_count; ++i) {
    result.forward.push_back(forward[i].finish());
    result.backward.push_back(backward[i].finish());
  }
  result.optimizer = optimizer.finish();
  result.unattributed = unattributed.finish();
  return result;
}

namespace {

std::string copy_kind_name(CopyActivity::Kind kind) {
  switch (kind) {
    case CopyActivity::Kind::HostToDevice: return "memcpy HtoD";
    case CopyActivity::Kind::DeviceToHost: return "memcpy DtoH";
    case CopyActivity::Kind::DeviceToDevice: return "memcpy DtoD";
    case CopyActivity::Kind::PeerToPeer: return "memcpy PtoP";
    case CopyActivity::Kind::Memset: return "memset";
    case CopyActivity::Kind::Other: return "memcpy";
  }
  return "memcpy";
}

}  // namespace

void add_gpu_lanes(core::ChromeTrace& chrome, const ActivityLog& log, const RangeTable& ranges,
                   const std::vector<std::string>& layer_names, std::uint64_t origin_ns, int pid) {
  chrome.name_process(pid, "GPU");
  std::vector<std::pair<std::uint32_t, std::uint32_t>> lanes;  // (device, stream), sorted: stable tids
  for (const auto& k : log.kernels) lanes.emplace_back(k.device, k.stream);
  for (const auto& c : log.copies) lanes.emplace_back(c.device, c.stream);
  std::sort(lanes.begin(), lanes.end());
  lanes.erase(std::unique(lanes.begin(), lanes.end()), lanes.end());
  const auto tid_of = [&](std::uint32_t device, std::uint32_t stream) {
    return static_cast<int>(std::lower_bound(lanes.begin(), lanes.end(), std::make_pair(device, stream)) -
                            lanes.begin());
  };
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    chrome.name_thread(pid, static_cast<int>(i),
                       "device " + std::to_string(lanes[i].first) + " stream " + std::to_string(lanes[i].second));
  }

  const auto owner_args = [&](std::uint32_t correlation_id) {
    nlohmann::json args = nlohmann::json::object();
    args["correlation"] = correlation_id;
    const auto it = log.external_ids.find(correlation_id);
    const RangeTable::Range* range = it == log.external_ids.end() ? nullptr : ranges.find(it->second);
    if (range != nullptr) {
      args["phase"] = phase_name(range->phase);
      if (range->layer >= 0 && static_cast<std::size_t>(range->layer) < layer_names.size()) {
        args["layer"] = layer_names[static_cast<std::size_t>(range->layer)];
      }
    }
    return args;
  };
  // Activity from before the origin (none is expected) is clamped rather than given negative time.
  const auto relative = [&](std::uint64_t t) { return t > origin_ns ? static_cast<std::int64_t>(t - origin_ns) : 0; };

  for (const auto& k : log.kernels) {
    chrome.add_span(pid, tid_of(k.device, k.stream), k.name, "kernel", relative(k.start_ns),
                    duration(k.start_ns, k.end_ns), owner_args(k.correlation_id));
  }
  for (const auto& c : log.copies) {
    auto args = owner_args(c.correlation_id);
    args["bytes"] = c.bytes;
    chrome.add_span(pid, tid_of(c.device, c.stream), copy_kind_name(c.kind), "copy", relative(c.start_ns),
                    duration(c.start_ns, c.end_ns), std::move(args));
  }
}

}  // namespace headroom::profiler::gpu
