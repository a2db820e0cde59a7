// The host-memory regime (core/host_memory.h): entered, it really changes how glibc hands out large
// blocks; traces and reports from another regime are named in a warning.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstring>
#include <memory>

#include "core/host_memory.h"

namespace headroom {
namespace {

TEST(HostMemory, EnteringTheRegimeKeepsLargeBlocksOnTheHeap) {
  const std::string regime = core::enter_host_memory_regime();
  ASSERT_EQ(regime, core::regime_of_process());
  ASSERT_NE(regime.find("glibc"), std::string::npos) << regime;  // the test binary runs on glibc's malloc
  EXPECT_NE(regime.find("mmap_threshold=1073741824"), std::string::npos) << regime;
  EXPECT_NE(regime.find("trim_threshold=1073741824"), std::string::npos) << regime;
  EXPECT_EQ(core::enter_host_memory_regime(), regime);  // idempotent

  // 48 MiB is past glibc's largest dynamic threshold (32 MiB): by default it would be mmapped.
  const std::size_t bytes = std::size_t{48} << 20;
  const std::size_t mmapped_before = ::mallinfo2().hblkhd;
  const core::HostMemoryUsage before = core::host_memory_usage();
  std::unique_ptr<char, decltype(&std::free)> block(static_cast<char*>(std::malloc(bytes)), &std::free);
  ASSERT_NE(block, nullptr);
  std::memset(block.get(), 1, bytes);  // resident only once touched
  EXPECT_EQ(::mallinfo2().hblkhd, mmapped_before);
  const core::HostMemoryUsage after = core::host_memory_usage();
  EXPECT_GE(after.heap_resident_bytes - before.heap_resident_bytes, static_cast<std::int64_t>(bytes));
  EXPECT_GE(after.malloc_in_use_bytes - before.malloc_in_use_bytes, static_cast<std::int64_t>(bytes));
  EXPECT_GE(after.resident_bytes, after.heap_resident_bytes);

  // Freed, it stays resident for the next step (below the trim threshold) until handed back.
  block.reset();
  const core::HostMemoryUsage freed = core::host_memory_usage();
  EXPECT_GE(freed.heap_resident_bytes - before.heap_resident_bytes, static_cast<std::int64_t>(bytes));
  EXPECT_TRUE(core::release_free_host_memory());
  EXPECT_LT(core::host_memory_usage().heap_resident_bytes - before.heap_resident_bytes, static_cast<std::int64_t>(bytes));
}

TEST(HostMemory, AnotherRegimeIsNamedInAWarning) {
  const std::string ours = "glibc 2.36 malloc, mmap_threshold=1073741824, trim_threshold=1073741824";
  EXPECT_EQ(core::regime_mismatch_warning(ours, ours), "");
  const std::string other = core::regime_mismatch_warning("libtcmalloc_minimal.so.4 malloc", ours);
  EXPECT_NE(other.find("(libtcmalloc_minimal.so.4 malloc)"), std::string::npos) << other;
  EXPECT_NE(other.find("(" + ours + ")"), std::string::npos) << other;
  // A trace from before regimes were recorded was measured in glibc's default.
  const std::string old = core::regime_mismatch_warning("", ours);
  EXPECT_NE(old.find(core::kUnrecordedRegime), std::string::npos) << old;
}

}  // namespace
}  // namespace headroom
