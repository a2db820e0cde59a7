#pragma once
// The GPU behind the profiler: its properties, a device-wide synchronize, and the activity
// collector. Implemented with the CUDA runtime and CUPTI (profiler/cupti); the profiler sees only
// this interface, so it needs no CUDA header.
#include <cstdint>
#include <memory>
#include <string>

#include "core/trace.h"
#include "profiler/gpu/activity.h"

namespace headroom::profiler::gpu {

// Records GPU activity while enabled. Ranges nest per CPU thread: work launched between
// push_range(id) and the matching pop_range() on that thread is attributed to id.
class ActivityCollector {
 public:
  virtual ~ActivityCollector() = default;
  // Recording is off until enabled; the profiler's plain (overhead reference) steps run with it off,
  // and with nothing of the collector's attached to the launches (CUPTI detached).
  virtual void set_enabled(bool enabled) = 0;
  virtual void push_range(std::uint64_t external_id) = 0;
  virtual void pop_range() = 0;
  // Waits for nothing: call after the device is synchronized. Returns every record completed
  // since the last flush.
  virtual ActivityLog flush() = 0;
  // The records' clock, to place them relative to a step's start.
  virtual std::uint64_t now_ns() = 0;
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  // The device as a trace records it (kind "cuda"): its copy link measured with pinned host memory,
  // a line through the median times of copies from 4 KiB to the probe's size (bandwidth: 1 / slope;
  // latency: the intercept).
  virtual const core::DeviceInfo& properties() const = 0;
  virtual void synchronize() = 0;
  virtual ActivityCollector& activities() = 0;
};

// Pushes a range for its lifetime.
class ScopedRange {
 public:
  ScopedRange(ActivityCollector* collector, std::uint64_t external_id) : collector_(collector) {
    if (collector_ != nullptr) collector_->push_range(external_id);
  }
  ~ScopedRange() {
    if (collector_ != nullptr) collector_->pop_range();
  }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  ActivityCollector* collector_;
};

}  // namespace headroom::profiler::gpu
