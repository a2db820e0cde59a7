#include "runtime/budget_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "core/units.h"

namespace headroom::runtime {

namespace {
thread_local Refusal t_last_refusal;
thread_local int t_host_scopes = 0;
// Above the default allocator's registration, so later default registrations do not displace it.
constexpr std::uint8_t kPriority = 10;
}  // namespace

BudgetAllocator::BudgetAllocator() : inner_(c10::GetCPUAllocator()) {}

BudgetAllocator& BudgetAllocator::instance() {
  static BudgetAllocator* allocator = [] {
    auto* a = new BudgetAllocator();  // never destroyed: tensors may be freed during static destruction
    c10::SetCPUAllocator(a, kPriority);
    return a;
  }();
  return *allocator;
}

HostScope::HostScope() { ++t_host_scopes; }
HostScope::~HostScope() { --t_host_scopes; }
bool HostScope::active() { return t_host_scopes > 0; }

const Refusal& BudgetAllocator::last_refusal() { return t_last_refusal; }
void BudgetAllocator::clear_last_refusal() { t_last_refusal = {}; }
void BudgetAllocator::set_last_refusal(const Refusal& refusal) { t_last_refusal = refusal; }

c10::DataPtr BudgetAllocator::allocate_counted(std::size_t bytes) const {
  if (bytes == 0) return inner_->allocate(0);  // no memory to count; its null pointer needs no entry
  const auto n = static_cast<std::int64_t>(bytes);
  if (HostScope::active()) {
    c10::DataPtr inner = inner_->allocate(bytes);
    void* data = inner.get();
    {
      std::lock_guard lock(mutex_);
      blocks_.emplace(data, Block{std::move(inner), n, true});
    }
    const std::int64_t now = host_in_use_.fetch_add(n) + n;
    std::int64_t seen = host_peak_.load();
    while (now > seen && !host_peak_.compare_exchange_weak(seen, now)) {
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  const std::int64_t limit = limit_.load();
  const std::int64_t now = in_use_.fetch_add(n) + n;
  if (limit > 0 && now > limit) {
    in_use_.fetch_sub(n);
    t_last_refusal = {n, now - n, limit};
    TORCH_CHECK_WITH(OutOfMemoryError, false, "headroom budget: allocating ", core::format_bytes(n),
                     " would take the bytes in use past the limit (", core::format_bytes(now - n), " of ",
                     core::format_bytes(limit), " in use)");
  }
  void* data = nullptr;
  try {
    c10::DataPtr inner = inner_->allocate(bytes);
    data = inner.get();
    std::lock_guard lock(mutex_);
    blocks_.emplace(data, Block{std::move(inner), n, false});
  } catch (...) {
    in_use_.fetch_sub(n);  // nothing was handed out
    throw;
  }
  std::int64_t seen = peak_.load();
  while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
  }
  return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
}

void BudgetAllocator::release(void* ptr) {
  if (ptr == nullptr) return;
  BudgetAllocator& self = instance();
  c10::DataPtr inner;
  std::int64_t bytes = 0;
  bool host = false;
  {
    std::lock_guard lock(self.mutex_);
    const auto it = self.blocks_.find(ptr);
    if (it == self.blocks_.end()) return;
    inner = std::move(it->second.inner);
    bytes = it->second.bytes;
    host = it->second.host;
    self.blocks_.erase(it);
  }
  (host ? self.host_in_use_ : self.in_use_).fetch_sub(bytes);
  // `inner` frees the memory through the default allocator when it goes out of scope here.
}

}  // namespace headroom::runtime
