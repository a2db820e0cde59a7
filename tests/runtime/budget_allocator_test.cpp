#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/budget_allocator.h"

namespace headroom {
namespace {

TEST(BudgetAllocator, RefusesPastTheBudgetAndCounts) {
  auto& allocator = runtime::BudgetAllocator::instance();
  const std::int64_t before = allocator.in_use();
  {
    torch::Tensor a = torch::empty({1024}, torch::kFloat32);  // 4 KiB
    EXPECT_EQ(allocator.in_use() - before, 4096);
    runtime::ScopedBudget budget(10000);  // on top of what is in use now
    torch::Tensor b = torch::empty({2048}, torch::kFloat32);  // 8 KiB fits
    EXPECT_THROW(torch::empty({1024}, torch::kFloat32), c10::OutOfMemoryError);
    EXPECT_EQ(runtime::BudgetAllocator::last_refusal().requested_bytes, 4096);
  }
  EXPECT_EQ(allocator.in_use(), before);
  EXPECT_EQ(allocator.limit(), 0);
}

TEST(BudgetAllocator, HostScopeIsCountedApartAndNeverRefused) {
  auto& allocator = runtime::BudgetAllocator::instance();
  const std::int64_t device_before = allocator.in_use(), host_before = allocator.host_in_use();
  {
    runtime::ScopedBudget budget(8192);
    torch::Tensor host;
    {
      runtime::HostScope scope;
      host = torch::empty({4096}, torch::kFloat32);  // 16 KiB: past the budget, but host-side
    }
    EXPECT_EQ(allocator.host_in_use() - host_before, 16384);
    EXPECT_EQ(allocator.in_use(), device_before);
    torch::Tensor device = torch::empty({1024}, torch::kFloat32);  // the budget still holds on the device
    EXPECT_EQ(allocator.in_use() - device_before, 4096);
    EXPECT_THROW(torch::empty({2048}, torch::kFloat32), c10::OutOfMemoryError);
  }
  EXPECT_EQ(allocator.in_use(), device_before);
  EXPECT_EQ(allocator.host_in_use(), host_before);
}

}  // namespace
}  // namespace headroom
