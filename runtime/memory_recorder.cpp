#include "runtime/memory_recorder.h"

#include <algorithm>

namespace headroom::runtime {

void MemoryRecorder::reportMemoryUsage(void* ptr, std::int64_t alloc_size, AllocatorTotal total_allocated,
                                       AllocatorTotal total_reserved, c10::Device device) {
  if (device.type() != device_) return;
  std::lock_guard lock(mutex_);
  reserved_ = static_cast<std::int64_t>(total_reserved);
  device_allocated_ = static_cast<std::int64_t>(total_allocated);
  if (device_allocated_at_start_ < 0) device_allocated_at_start_ = device_allocated_ - alloc_size;
  reserved_peak_since_mark_ = std::max(reserved_peak_since_mark_, reserved_);
  reserved_peak_ = std::max(reserved_peak_, reserved_);
  if (alloc_size > 0) {
    live_[ptr] = Allocation{alloc_size, owner_};
    live_by_owner_[owner_] += alloc_size;
    allocated_ += alloc_size;
    peak_since_mark_ = std::max(peak_since_mark_, allocated_);
    peak_holding_since_mark_ = std::max(peak_holding_since_mark_, allocated_ + held_since_mark_);
    peak_ = std::max(peak_, allocated_);
    return;
  }
  const auto it = live_.find(ptr);
  if (it == live_.end()) {
    ++untracked_frees_;
    return;
  }
  live_by_owner_[it->second.owner] -= it->second.bytes;
  allocated_ -= it->second.bytes;
  if (it->second.owner >= 0 && it->second.owner < hold_below_) held_since_mark_ += it->second.bytes;
  live_.erase(it);
}

void MemoryRecorder::set_owner(int owner) {
  std::lock_guard lock(mutex_);
  owner_ = owner;
}

std::int64_t MemoryRecorder::allocated() const {
  std::lock_guard lock(mutex_);
  return allocated_;
}

std::int64_t MemoryRecorder::device_allocated() const {
  std::lock_guard lock(mutex_);
  return device_allocated_;
}

std::int64_t MemoryRecorder::device_allocated_at_start() const {
  std::lock_guard lock(mutex_);
  return device_allocated_at_start_;
}

std::int64_t MemoryRecorder::live_bytes_of(int owner) const {
  std::lock_guard lock(mutex_);
  const auto it = live_by_owner_.find(owner);
  return it == live_by_owner_.end() ? 0 : it->second;
}

bool MemoryRecorder::is_live(const void* ptr) const {
  std::lock_guard lock(mutex_);
  return live_.contains(ptr);
}

void MemoryRecorder::mark() {
  std::lock_guard lock(mutex_);
  peak_since_mark_ = allocated_;
  held_since_mark_ = 0;
  peak_holding_since_mark_ = allocated_;
  reserved_peak_since_mark_ = reserved_;
}

std::int64_t MemoryRecorder::peak_since_mark() const {
  std::lock_guard lock(mutex_);
  return peak_since_mark_;
}

void MemoryRecorder::hold_frees_of_owners_below(int owner_limit) {
  std::lock_guard lock(mutex_);
  hold_below_ = owner_limit;
}

std::int64_t MemoryRecorder::peak_holding_since_mark() const {
  std::lock_guard lock(mutex_);
  return peak_holding_since_mark_;
}

void MemoryRecorder::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = allocated_;
  reserved_peak_ = reserved_;
}

std::int64_t MemoryRecorder::peak() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

std::int64_t MemoryRecorder::reserved() const {
  std::lock_guard lock(mutex_);
  return reserved_;
}

std::int64_t MemoryRecorder::reserved_peak_since_mark() const {
  std::lock_guard lock(mutex_);
  return reserved_peak_since_mark_;
}

std::int64_t MemoryRecorder::reserved_peak() const {
  std::lock_guard lock(mutex_);
  return reserved_peak_;
}

std::int64_t MemoryRecorder::untracked_frees() const {
  std::lock_guard lock(mutex_);
  return untracked_frees_;
}

}  // namespace headroom::runtime
