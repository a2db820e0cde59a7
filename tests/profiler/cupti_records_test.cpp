// CUPTI record decoding with records built in memory (no GPU).
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "profiler/cupti/cupti_records.h"

namespace headroom::profiler::cupti {
namespace {

// Records laid out as CUPTI would hand them over, one struct each.
class InMemorySource : public RecordSource {
 public:
  template <typename Record>
  void add(const Record& record) {
    records_.push_back(reinterpret_cast<const CUpti_Activity*>(&record));
  }
  const CUpti_Activity* next() override { return i_ < records_.size() ? records_[i_++] : nullptr; }

 private:
  std::vector<const CUpti_Activity*> records_;
  std::size_t i_ = 0;
};

CUpti_ActivityKernel10 kernel(const char* name, std::uint64_t start, std::uint64_t end, std::uint32_t stream,
                              std::uint32_t correlation) {
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = name;
  k.start = start;
  k.end = end;
  k.deviceId = 0;
  k.streamId = stream;
  k.correlationId = correlation;
  return k;
}

TEST(CuptiRecords, DecodesKernelsCopiesMemoryAndCorrelations) {
  const auto k1 = kernel("ampere_sgemm_128x64_tn", 100, 250, 7, 11);
  const auto k2 = kernel("vectorized_elementwise_kernel", 260, 270, 13, 12);

  CUpti_ActivityMemcpy6 copy{};
  copy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  copy.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  copy.bytes = 1 << 20;
  copy.start = 10;
  copy.end = 90;
  copy.streamId = 7;
  copy.correlationId = 10;

  CUpti_ActivityMemset4 memset{};
  memset.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  memset.bytes = 4096;
  memset.start = 95;
  memset.end = 99;
  memset.streamId = 7;
  memset.correlationId = 11;

  CUpti_ActivityMemory4 alloc{};
  alloc.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  alloc.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  alloc.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  alloc.address = 0x7f0000000000;
  alloc.bytes = 2 << 20;
  alloc.timestamp = 50;
  alloc.correlationId = 12;
  CUpti_ActivityMemory4 release = alloc;
  release.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
  release.timestamp = 500;
  CUpti_ActivityMemory4 pinned = alloc;  // host memory is not the device's: not recorded
  pinned.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;

  CUpti_ActivityExternalCorrelation ext{};
  ext.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  ext.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
  ext.externalId = 42;
  ext.correlationId = 11;
  CUpti_ActivityExternalCorrelation other_tool = ext;  // another tool's kind must not override ours
  other_tool.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1;
  other_tool.externalId = 999;

  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  api.correlationId = 11;

  InMemorySource source;
  source.add(ext);
  source.add(other_tool);
  source.add(api);
  source.add(copy);
  source.add(memset);
  source.add(k1);
  source.add(alloc);
  source.add(pinned);
  source.add(k2);
  source.add(release);
  const gpu::ActivityLog log = decode_records(source);

  ASSERT_EQ(log.kernels.size(), 2u);
  EXPECT_EQ(log.kernels[0], (gpu::KernelActivity{"ampere_sgemm_128x64_tn", 100, 250, 0, 7, 11}));
  EXPECT_EQ(log.kernels[1].name, "vectorized_elementwise_kernel");
  EXPECT_EQ(log.kernels[1].stream, 13u);
  ASSERT_EQ(log.copies.size(), 2u);
  EXPECT_EQ(log.copies[0].kind, gpu::CopyActivity::Kind::HostToDevice);
  EXPECT_EQ(log.copies[0].bytes, 1u << 20);
  EXPECT_EQ(log.copies[1].kind, gpu::CopyActivity::Kind::Memset);
  EXPECT_EQ(log.copies[1].end_ns, 99u);
  ASSERT_EQ(log.memory.size(), 2u);
  EXPECT_TRUE(log.memory[0].allocation);
  EXPECT_FALSE(log.memory[1].allocation);
  EXPECT_EQ(log.memory[0].bytes, 2u << 20);
  ASSERT_EQ(log.external_ids.size(), 1u);
  EXPECT_EQ(log.external_ids.at(11), 42u);
}

TEST(CuptiRecords, DecodedRecordsAttributeThroughExternalIds) {
  gpu::RangeTable ranges;
  const auto fwd = ranges.open(0, gpu::Phase::Forward);
  const auto k = kernel("gemm", 1000, 1800, 7, 5);
  CUpti_ActivityExternalCorrelation ext{};
  ext.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  ext.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
  ext.externalId = fwd;
  ext.correlationId = 5;
  InMemorySource source;
  source.add(ext);
  source.add(k);
  const auto attribution = gpu::attribute(decode_records(source), ranges, 1);
  EXPECT_EQ(attribution.forward[0].kernel_ns, 800);
  EXPECT_EQ(attribution.unattributed.kernels, 0);
}

TEST(CuptiRecords, AKindThatWasNotEnabledIsAnError) {
  CUpti_ActivityOverhead3 overhead{};
  overhead.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  InMemorySource source;
  source.add(overhead);
  EXPECT_THROW(decode_records(source), std::logic_error);
}

TEST(CuptiRecords, CopyKindsMap) {
  EXPECT_EQ(copy_kind(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH), gpu::CopyActivity::Kind::DeviceToHost);
  EXPECT_EQ(copy_kind(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD), gpu::CopyActivity::Kind::DeviceToDevice);
  EXPECT_EQ(copy_kind(CUPTI_ACTIVITY_MEMCPY_KIND_PTOP), gpu::CopyActivity::Kind::PeerToPeer);
  EXPECT_EQ(copy_kind(CUPTI_ACTIVITY_MEMCPY_KIND_HTOH), gpu::CopyActivity::Kind::Other);
}

}  // namespace
}  // namespace headroom::profiler::cupti
