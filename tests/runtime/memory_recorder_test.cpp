#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <optional>

#include "runtime/memory_recorder.h"

namespace headroom {
namespace {

TEST(MemoryRecorder, SeesAllocationsWhileInstalledAndTheirOwners) {
  auto recorder = std::make_shared<runtime::MemoryRecorder>();
  {
    runtime::ScopedMemoryRecording recording(recorder);
    recorder->set_owner(3);
    const torch::Tensor kept = torch::empty({1024}, torch::kFloat32);
    recorder->set_owner(runtime::MemoryRecorder::kNoOwner);
    {
      const torch::Tensor transient = torch::empty({2048}, torch::kFloat32);
    }
    EXPECT_EQ(recorder->live_bytes_of(3), 4096);
    EXPECT_EQ(recorder->allocated(), 4096);
    EXPECT_EQ(recorder->peak(), 4096 + 8192);
  }
  const torch::Tensor unseen = torch::empty({4096}, torch::kFloat32);
  EXPECT_EQ(recorder->allocated(), 0);
}

// The allocator's own total (on CUDA the device's, workspaces allocated before recording began
// among it): as it stands after each report, and as it stood when recording began, from the first
// report whether that one allocated or freed. Reports of another device type are not this one's.
TEST(MemoryRecorder, KeepsTheAllocatorsOwnTotalAsRecordingBeganAndSince) {
  const c10::Device device(c10::DeviceType::CPU);
  for (const std::int64_t first_change : {std::int64_t{256}, std::int64_t{-256}}) {
    runtime::MemoryRecorder recorder(c10::DeviceType::CPU);
    EXPECT_EQ(recorder.device_allocated(), -1);
    EXPECT_EQ(recorder.device_allocated_at_start(), -1);
    recorder.reportMemoryUsage(reinterpret_cast<void*>(0x10), 512, 64 << 20, 96 << 20, c10::Device(c10::DeviceType::CUDA, 0));
    EXPECT_EQ(recorder.device_allocated(), -1);
    int block = 0;
    recorder.reportMemoryUsage(&block, first_change, static_cast<runtime::AllocatorTotal>((32 << 20) + first_change), 96 << 20, device);
    EXPECT_EQ(recorder.device_allocated_at_start(), 32 << 20) << first_change;
    EXPECT_EQ(recorder.device_allocated(), (32 << 20) + first_change);
    int other = 0;
    recorder.reportMemoryUsage(&other, 1024, static_cast<runtime::AllocatorTotal>((32 << 20) + first_change + 1024), 96 << 20, device);
    EXPECT_EQ(recorder.device_allocated_at_start(), 32 << 20);
    EXPECT_EQ(recorder.device_allocated(), (32 << 20) + first_change + 1024);
  }
}

// Frees of earlier owners' allocations after hold_frees_of_owners_below count as held: the holding
// peak is what the peak would have been had they stayed.
TEST(MemoryRecorder, CountsHeldFreesOfEarlierOwnersInTheHoldingPeak) {
  auto recorder = std::make_shared<runtime::MemoryRecorder>();
  runtime::ScopedMemoryRecording recording(recorder);
  recorder->set_owner(1);
  std::optional<torch::Tensor> input = torch::empty({1024}, torch::kFloat32);  // 4 KiB, an earlier layer's
  recorder->set_owner(2);
  std::optional<torch::Tensor> own = torch::empty({512}, torch::kFloat32);  // 2 KiB, the layer's own
  recorder->set_owner(runtime::MemoryRecorder::kNoOwner);
  recorder->hold_frees_of_owners_below(2);
  recorder->mark();
  input.reset();
  own.reset();
  const torch::Tensor later = torch::empty({2048}, torch::kFloat32);  // 8 KiB
  EXPECT_EQ(recorder->peak_since_mark(), 8192);                 // the later tensor alone
  EXPECT_EQ(recorder->peak_holding_since_mark(), 8192 + 4096);  // the input held; the own tensor not
  recorder->hold_frees_of_owners_below(0);
  recorder->mark();
  EXPECT_EQ(recorder->peak_holding_since_mark(), 8192);
}

}  // namespace
}  // namespace headroom
