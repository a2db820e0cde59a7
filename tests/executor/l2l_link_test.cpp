#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "core/errors.h"
#include "executor/l2l_link.h"
#include "runtime/budget_allocator.h"

namespace headroom {
namespace {

// On the CPU the link's host side is host-scoped storage and its device side is budgeted: a
// parameter buffer sent over lands on the device side, a gradient sent back lands on the host side,
// each copy equal to its source.
TEST(L2LLink, OnTheCpuHostCopiesAreCountedApartFromTheDevice) {
  auto& allocator = runtime::BudgetAllocator::instance();
  const executor::L2LLink link(torch::kCPU);
  const std::int64_t host_before = allocator.host_in_use();
  torch::Tensor host = link.host_empty({1024}, torch::TensorOptions(torch::kFloat32));
  host.copy_(torch::arange(1024, torch::kFloat32));
  EXPECT_EQ(allocator.host_in_use() - host_before, 4096);
  const std::int64_t device_after_source = allocator.in_use();
  const torch::Tensor on_device = link.to_device_landed(host);
  EXPECT_EQ(allocator.in_use() - device_after_source, 4096);
  EXPECT_TRUE(on_device.equal(host));
  const executor::HostLanding back = link.to_host(on_device * 2);
  EXPECT_EQ(back.landed, nullptr);  // a CPU copy is done on return
  back.wait();
  EXPECT_EQ(allocator.host_in_use() - host_before, 8192);
  EXPECT_TRUE(back.host.equal(host * 2));
  EXPECT_TRUE(link.back_to_device(back.host).equal(host * 2));
  const torch::Tensor stashed = link.stash_to_host(on_device * 3);
  EXPECT_EQ(allocator.host_in_use() - host_before, 3 * 4096);
  EXPECT_TRUE(link.back_to_device(stashed).equal(host * 3));
}

TEST(L2LLink, RefusesDevicesOtherThanTheCpuAndCuda) {
  try {
    executor::L2LLink link(torch::Device(torch::kMeta));
    FAIL() << "an L2L link to the meta device was made";
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("CPU or on CUDA, not on meta"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace headroom
