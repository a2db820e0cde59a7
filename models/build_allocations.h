#pragma once
// What building a model leaves allocated: counted through libtorch's allocator reporting while the
// model is built, every report passed on to whatever measures around it (the executor's recorder
// must still see the model's memory). A model's parameters are not all it holds: buffers, tensors a
// batch generator keeps (a task's teacher), a TorchScript module's debug records.
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/version.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_set>

namespace headroom::models {

class BuildAllocations : public c10::MemoryReportingInfoBase {
 public:
  // torch 2.x reports totals as size_t, 1.13 as int64_t.
#if TORCH_VERSION_MAJOR >= 2
  using Total = std::size_t;
#else
  using Total = std::int64_t;
#endif

  BuildAllocations() : outer_(c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE)) {}

  void reportMemoryUsage(void* ptr, std::int64_t alloc_size, Total total_allocated, Total total_reserved,
                         c10::Device device) override {
    if (device.is_cpu()) {
      std::lock_guard lock(mutex_);
      // Only blocks allocated here count, so a free of older memory does not take bytes off.
      if (alloc_size > 0) {
        live_.insert(ptr);
        bytes_ += alloc_size;
      } else if (live_.erase(ptr) > 0) {
        bytes_ += alloc_size;
      }
    }
    if (auto* outer = dynamic_cast<c10::MemoryReportingInfoBase*>(outer_); outer != nullptr && outer->memoryProfilingEnabled()) {
      outer->reportMemoryUsage(ptr, alloc_size, total_allocated, total_reserved, device);
    }
  }
  bool memoryProfilingEnabled() const override { return true; }

  // Bytes allocated on the CPU while counting and not freed since.
  std::int64_t bytes() const {
    std::lock_guard lock(mutex_);
    return bytes_;
  }

 private:
  c10::DebugInfoBase* outer_;
  mutable std::mutex mutex_;
  std::unordered_set<const void*> live_;
  std::int64_t bytes_ = 0;
};

// Runs `build` with its allocations counted; the model it returns is told what it holds beyond its
// parameters.
template <typename Build>
auto counting_build_allocations(Build&& build) {
  auto counter = std::make_shared<BuildAllocations>();
  auto model = [&] {
    c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, counter);
    return build();
  }();
  model.set_extra_resident_bytes(counter->bytes() - model.parameter_bytes());
  return model;
}

}  // namespace headroom::models
