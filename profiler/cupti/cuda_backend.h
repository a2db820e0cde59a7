#pragma once
// The GPU backend on CUDA: the runtime API for the device's properties and synchronization, CUPTI's
// Activity API for what ran. Torch-free: the profiler reaches it through gpu::GpuBackend.
#include <memory>
#include <string>

#include "profiler/gpu/backend.h"

namespace headroom::profiler::cupti {

// "<call>: <CUPTI result name>" for a failed CUPTI call; the error every CUPTI call throws.
std::string cupti_error(const char* call, int result);

// Number of CUDA devices; throws std::runtime_error naming the CUDA error when there is no usable
// driver or device.
int cuda_device_count();

// Name, memory, SMs and the pinned host<->device link each way: bandwidth and latency, from the
// median times of `repeats` copies at sizes from 4 KiB to `transfer_bytes` (CUDA events). Throws std::runtime_error with CUDA's reason.
core::DeviceInfo probe_cuda_device(int device, std::int64_t transfer_bytes = 256LL << 20, int repeats = 5);

// The device's backend, CUPTI's activity recording ready (one per process: CUPTI's buffers are
// process-wide); CUPTI itself is attached only while recording is enabled, so a CUPTI failure shows
// at the first enable, as std::runtime_error naming the failing call and its result.
std::unique_ptr<gpu::GpuBackend> make_cuda_backend(int device);

}  // namespace headroom::profiler::cupti
