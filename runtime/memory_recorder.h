#pragma once
// Measures memory through libtorch's allocator reporting hook: while a ScopedMemoryRecording is
// alive on a thread, every allocation and free that libtorch's allocators make for that thread's
// work (CPU, and CUDA's caching allocator) is reported here with its pointer and size. Each
// allocation is tagged with the owner current when it was made (the profiler sets the layer), so
// the bytes a layer still holds can be read at any time.
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/version.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace headroom::runtime {

// torch 2.x reports totals as size_t, 1.13 as int64_t.
#if TORCH_VERSION_MAJOR >= 2
using AllocatorTotal = std::size_t;
#else
using AllocatorTotal = std::int64_t;
#endif

class MemoryRecorder : public c10::MemoryReportingInfoBase {
 public:
  static constexpr int kNoOwner = -1;

  explicit MemoryRecorder(c10::DeviceType device = c10::DeviceType::CPU) : device_(device) {}

  void reportMemoryUsage(void* ptr, std::int64_t alloc_size, AllocatorTotal total_allocated,
                         AllocatorTotal total_reserved, c10::Device device) override;
  bool memoryProfilingEnabled() const override { return true; }

  // Allocations made from now on belong to `owner` (a layer id, or kNoOwner).
  void set_owner(int owner);

  // Bytes allocated since recording began and not yet freed. Frees of memory allocated before
  // recording began are not counted (they are reported in untracked_frees()).
  std::int64_t allocated() const;
  // Bytes still allocated that were allocated while `owner` was current.
  std::int64_t live_bytes_of(int owner) const;
  // Whether a pointer allocated while recording is still allocated.
  bool is_live(const void* ptr) const;

  // The highest allocated() since the last mark().
  void mark();
  std::int64_t peak_since_mark() const;
  // Frees from now on of allocations whose owner is a layer below `owner_limit` (0 and up) count as
  // held: peak_holding_since_mark() is the highest allocated() plus the bytes so held since the last
  // mark(), what the peak would be had those tensors stayed allocated. A limit of 0 holds nothing.
  void hold_frees_of_owners_below(int owner_limit);
  std::int64_t peak_holding_since_mark() const;
  // The highest allocated() since the last reset_peak(); marks do not disturb it.
  void reset_peak();
  std::int64_t peak() const;

  // The allocator's own count of reserved bytes at the last report (CUDA's caching allocator).
  std::int64_t reserved() const;
  // The allocator's own count of allocated bytes: CUDA's caching allocator counts everything on the
  // device, from before recording began too (cuBLAS's workspaces among it). At the last report, and
  // as recording began (the first report's total less its own change); -1 until something is reported.
  std::int64_t device_allocated() const;
  std::int64_t device_allocated_at_start() const;
  // The highest reserved() since the last mark() / reset_peak().
  std::int64_t reserved_peak_since_mark() const;
  std::int64_t reserved_peak() const;
  std::int64_t untracked_frees() const;

 private:
  struct Allocation {
    std::int64_t bytes;
    int owner;
  };
  c10::DeviceType device_;
  mutable std::mutex mutex_;
  std::unordered_map<const void*, Allocation> live_;
  std::unordered_map<int, std::int64_t> live_by_owner_;
  int owner_ = kNoOwner;
  std::int64_t allocated_ = 0;
  std::int64_t peak_since_mark_ = 0;
  int hold_below_ = 0;
  std::int64_t held_since_mark_ = 0;
  std::int64_t peak_holding_since_mark_ = 0;
  std::int64_t peak_ = 0;
  std::int64_t reserved_ = 0;
  std::int64_t device_allocated_ = -1;
  std::int64_t device_allocated_at_start_ = -1;
  std::int64_t reserved_peak_since_mark_ = 0;
  std::int64_t reserved_peak_ = 0;
  std::int64_t untracked_frees_ = 0;
};

// Installs a recorder for the current thread (and the autograd work it runs) for its lifetime.
class ScopedMemoryRecording {
 public:
  explicit ScopedMemoryRecording(std::shared_ptr<MemoryRecorder> recorder)
      : guard_(c10::DebugInfoKind::PROFILER_STATE, std::move(recorder)) {}

 private:
  c10::DebugInfoGuard guard_;
};

}  // namespace headroom::runtime
