#pragma once
// Makes the CPU a memory-limited device: a counting allocator installed as libtorch's CPU
// allocator (c10::SetCPUAllocator) that refuses an allocation which would take the bytes in use
// past the budget, with c10::OutOfMemoryError, as a GPU would. It wraps the default allocator, so
// the allocator reporting hook still sees every allocation.
//
// Host scope: an L2L step keeps parameters, gradients and optimizer state on the host, which on a
// GPU is another memory altogether. On the CPU both are the same heap, so allocations made while a
// HostScope is alive on the allocating thread are counted apart (host_in_use/host_peak): reported,
// never refused, and not part of in_use/peak, which stay the device side.
#include <c10/core/Allocator.h>
#include <torch/version.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace headroom::runtime {

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

  // Refuse allocations that would take the bytes in use past `bytes`; 0 lifts the limit.
  void set_limit(std::int64_t bytes) { limit_.store(bytes); }
  std::int64_t limit() const { return limit_.load(); }
  std::int64_t in_use() const { return in_use_.load(); }
  std::int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(in_use_.load()); }
  // Host-side bytes (allocated inside a HostScope), counted apart from the device side above.
  std::int64_t host_in_use() const { return host_in_use_.load(); }
  std::int64_t host_peak() const { return host_peak_.load(); }
  void reset_host_peak() { host_peak_.store(host_in_use_.load()); }
  static const Refusal& last_refusal();
  static void clear_last_refusal();
  // Carries a refusal made on a worker thread (an L2L copy thread) over to the thread that reports it.
  static void set_last_refusal(const Refusal& refusal);

  // torch 2.3 made allocate non-const and added copy_data (what Allocator::clone copies with).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(std::size_t bytes) override { return allocate_counted(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(std::size_t bytes) const override { return allocate_counted(bytes); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

 private:
  BudgetAllocator();
  c10::DataPtr allocate_counted(std::size_t bytes) const;
  static void release(void* ptr);

  c10::Allocator* inner_;
  mutable std::mutex mutex_;
  struct Block {
    c10::DataPtr inner;
    std::int64_t bytes;
    bool host;
  };
  mutable std::unordered_map<void*, Block> blocks_;
  mutable std::atomic<std::int64_t> in_use_{0};
  mutable std::atomic<std::int64_t> peak_{0};
  mutable std::atomic<std::int64_t> host_in_use_{0};
  mutable std::atomic<std::int64_t> host_peak_{0};
  std::atomic<std::int64_t> limit_{0};
};

// While alive, what this thread allocates is host-side storage (see above). Nests.
class HostScope {
 public:
  HostScope();
  ~HostScope();
  HostScope(const HostScope&) = delete;
  HostScope& operator=(const HostScope&) = delete;
  static bool active();
};

// Enforces a budget for its lifetime on what is allocated from its start: memory that already
// exists (a dataset loaded into host memory) is not the run's.
class ScopedBudget {
 public:
  explicit ScopedBudget(std::int64_t bytes)
      : baseline_(BudgetAllocator::instance().in_use()), limit_(baseline_ + bytes) {
    resume();
  }
  ~ScopedBudget() { suspend(); }
  ScopedBudget(const ScopedBudget&) = delete;
  ScopedBudget& operator=(const ScopedBudget&) = delete;

  void suspend() { BudgetAllocator::instance().set_limit(0); }
  void resume() { BudgetAllocator::instance().set_limit(limit_); }
  std::int64_t baseline() const { return baseline_; }

 private:
  std::int64_t baseline_;
  std::int64_t limit_;
};

}  // namespace headroom::runtime
