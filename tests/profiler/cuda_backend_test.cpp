// The CUDA backend's device probe (profiler/cupti/cuda_backend.h), and its errors on a machine
// without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "profiler/cupti/cuda_backend.h"

namespace headroom::profiler::cupti {
namespace {

// On a machine with a GPU the probe measures it; without one (this project's CI) it fails with
// CUDA's reason rather than inventing numbers.
TEST(CudaBackend, ProbesTheDeviceOrSaysWhyNot) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    try {
      probe_cuda_device(0);
      FAIL() << "the probe returned properties with no CUDA device";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("cudaGetDeviceCount"), std::string::npos) << e.what();
    }
    EXPECT_THROW(make_cuda_backend(0), std::runtime_error);
    return;
  }
  const core::DeviceInfo p = probe_cuda_device(0, 64 << 20, 3);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.total_memory_bytes, 1LL << 30);
  EXPECT_GT(p.sm_count, 0);
  EXPECT_GT(p.host_to_device_bytes_per_s, 1e9);  // any PCIe or NVLink host link moves over 1 GB/s pinned
  EXPECT_GT(p.device_to_host_bytes_per_s, 1e9);
}

}  // namespace
}  // namespace headroom::profiler::cupti
