#pragma once
// Makes the CPU a memory-limited device: a counting allocator installed as libtorch's CPU
// allocator (c10::SetCPUAllocator) that refuses an allocation which would take the bytes in use
// past the budget, with c10::OutOfMemoryError, as a GPU would. It wraps the default allocator, so
// the allocator reporting hook still sees every allocation.
#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace headroom::executor {

// The last allocation the budget refused on this thread.
struct Refusal {
  std::int64_t requested_bytes = 0;
  std::int64_t in_use_bytes = 0;
  std::int64_t budget_bytes = 0;
};

class BudgetAllocator final : public c10::Allocator {
 public:
  // The process-wide instance, installed as the CPU allocator on first use. It stays installed:
  // tensors it made may outlive any one run, and their deleters come back here.
  static BudgetAllocator& instance();

  // 0 lifts the limit.
  void set_budget(std::int64_t bytes) { budget_.store(bytes); }
  std::int64_t budget() const { return budget_.load(); }
  std::int64_t in_use() const { return in_use_.load(); }
  std::int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(in_use_.load()); }
  static const Refusal& last_refusal();

  c10::DataPtr allocate(std::size_t bytes) const override;
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

 private:
  BudgetAllocator();
  static void release(void* ptr);

  c10::Allocator* inner_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, std::pair<c10::DataPtr, std::int64_t>> blocks_;
  mutable std::atomic<std::int64_t> in_use_{0};
  mutable std::atomic<std::int64_t> peak_{0};
  std::atomic<std::int64_t> budget_{0};
};

// Enforces a budget for its lifetime.
class ScopedBudget {
 public:
  explicit ScopedBudget(std::int64_t bytes) { BudgetAllocator::instance().set_budget(bytes); }
  ~ScopedBudget() { BudgetAllocator::instance().set_budget(0); }
  ScopedBudget(const ScopedBudget&) = delete;
  ScopedBudget& operator=(const ScopedBudget&) = delete;
};

}  // namespace headroom::executor
