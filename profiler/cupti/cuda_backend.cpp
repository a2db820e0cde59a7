#include "profiler/cupti/cuda_backend.h"

#include <cuda_runtime_api.h>
#include <cupti.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "core/affine_fit.h"
#include "core/statistics.h"
#include "profiler/cupti/cupti_records.h"

namespace headroom::profiler::cupti {

std::string cupti_error(const char* call, int result) {
  const char* text = nullptr;
  if (cuptiGetResultString(static_cast<CUptiResult>(result), &text) != CUPTI_SUCCESS || text == nullptr) {
    text = "unknown CUPTI result";
  }
  return std::string("CUPTI ") + call + " failed: " + text + " (" + std::to_string(result) + ")";
}

namespace {

void check_cupti(CUptiResult result, const char* call) {
  if (result != CUPTI_SUCCESS) throw std::runtime_error(cupti_error(call, result));
}

void check_cuda(cudaError_t result, const char* call) {
  if (result != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA ") + call + " failed: " + cudaGetErrorName(result) + " (" +
                             cudaGetErrorString(result) + ")");
  }
}

// Frees what a probe allocated on every path out of it.
struct ProbeBuffers {
  void* host = nullptr;
  void* device = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
  ~ProbeBuffers() {
    if (begin != nullptr) cudaEventDestroy(begin);
    if (end != nullptr) cudaEventDestroy(end);
    if (device != nullptr) cudaFree(device);
    if (host != nullptr) cudaFreeHost(host);
  }
};

// The median time of `bytes` copied, by CUDA events around each copy.
double median_copy_seconds(ProbeBuffers& buffers, std::int64_t bytes, int repeats, cudaMemcpyKind kind) {
  void* dst = kind == cudaMemcpyHostToDevice ? buffers.device : buffers.host;
  const void* src = kind == cudaMemcpyHostToDevice ? buffers.host : buffers.device;
  check_cuda(cudaMemcpy(dst, src, static_cast<std::size_t>(bytes), kind), "cudaMemcpy (warm-up)");
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    check_cuda(cudaEventRecord(buffers.begin), "cudaEventRecord");
    check_cuda(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), kind), "cudaMemcpyAsync");
    check_cuda(cudaEventRecord(buffers.end), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(buffers.end), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, buffers.begin, buffers.end), "cudaEventElapsedTime");
    if (ms > 0) times.push_back(static_cast<double>(ms) * 1e-3);
  }
  if (times.empty()) throw std::runtime_error("CUDA copy probe: every copy timed at 0 ms");
  return core::median(times);
}

// Copies from 4 KiB up to `largest` bytes, a line through their times relative to each: the small
// ones tell the latency, the large ones the bandwidth.
core::LinkLine measure_link(ProbeBuffers& buffers, std::int64_t largest, int repeats, cudaMemcpyKind kind) {
  std::vector<double> bytes, seconds;
  for (std::int64_t size = std::int64_t{4} << 10; size < largest; size *= 16) {
    bytes.push_back(static_cast<double>(size));
    seconds.push_back(median_copy_seconds(buffers, size, repeats, kind));
  }
  bytes.push_back(static_cast<double>(largest));
  seconds.push_back(median_copy_seconds(buffers, largest, repeats, kind));
  return core::fit_link_line(bytes, seconds, kind == cudaMemcpyHostToDevice ? "CUDA host-to-device copy probe" : "CUDA device-to-host copy probe");
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count == 0) throw std::runtime_error("CUDA cudaGetDeviceCount: no CUDA device");
  return count;
}

core::DeviceInfo probe_cuda_device(int device, std::int64_t transfer_bytes, int repeats) {
  const int count = cuda_device_count();
  if (device < 0 || device >= count) {
    throw std::runtime_error("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                             " devices)");
  }
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  core::DeviceInfo out;
  out.kind = "cuda";
  out.name = prop.name;
  out.total_memory_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
  out.sm_count = prop.multiProcessorCount;

  ProbeBuffers buffers;
  check_cuda(cudaMallocHost(&buffers.host, static_cast<std::size_t>(transfer_bytes)), "cudaMallocHost");
  check_cuda(cudaMalloc(&buffers.device, static_cast<std::size_t>(transfer_bytes)), "cudaMalloc");
  check_cuda(cudaEventCreate(&buffers.begin), "cudaEventCreate");
  check_cuda(cudaEventCreate(&buffers.end), "cudaEventCreate");
  const core::LinkLine in = measure_link(buffers, transfer_bytes, repeats, cudaMemcpyHostToDevice);
  const core::LinkLine back = measure_link(buffers, transfer_bytes, repeats, cudaMemcpyDeviceToHost);
  out.host_to_device_bytes_per_s = in.bytes_per_second;
  out.host_to_device_latency_ns = in.latency_ns;
  out.device_to_host_bytes_per_s = back.bytes_per_second;
  out.device_to_host_latency_ns = back.latency_ns;
  return out;
}

namespace {

// CUPTI hands buffers back on its own thread; decoded records wait here until flush().
struct CompletedRecords {
  std::mutex mutex;
  gpu::ActivityLog log;
  std::string error;  // the first failure inside a callback, reported by the next flush()
};
CompletedRecords g_completed;
std::atomic<bool> g_started{false};

constexpr std::size_t kBufferBytes = 8 << 20;
constexpr std::size_t kBufferAlignment = 8;

void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

class BufferSource : public RecordSource {
 public:
  BufferSource(uint8_t* buffer, size_t valid) : buffer_(buffer), valid_(valid) {}
  const CUpti_Activity* next() override {
    if (done_) return nullptr;
    const CUptiResult result = cuptiActivityGetNextRecord(buffer_, valid_, &record_);
    if (result == CUPTI_SUCCESS) return record_;
    done_ = true;
    if (result != CUPTI_ERROR_MAX_LIMIT_REACHED) check_cupti(result, "cuptiActivityGetNextRecord");
    return nullptr;
  }

 private:
  uint8_t* buffer_;
  size_t valid_;
  CUpti_Activity* record_ = nullptr;
  bool done_ = false;
};

void CUPTIAPI on_buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t size, size_t valid) {
  try {
    BufferSource source(buffer, valid);
    gpu::ActivityLog log = decode_records(source);
    size_t dropped = 0;
    check_cupti(cuptiActivityGetNumDroppedRecords(context, stream, &dropped), "cuptiActivityGetNumDroppedRecords");
    log.dropped_records = dropped;
    std::lock_guard lock(g_completed.mutex);
    g_completed.log.append(std::move(log));
  } catch (const std::exception& e) {
    std::lock_guard lock(g_completed.mutex);
    if (g_completed.error.empty()) g_completed.error = e.what();
  }
  std::free(buffer);
}

// CUPTI is attached only while recording. Once attached it taxes every kernel launch even with its
// activity kinds off, most where the GPU waits on launches (docs/results.md, "CUPTI attached
// between steps"), and the plain steps between the profiled ones are the time plans predict from,
// so each disable detaches it (cuptiFinalize, after the device is synchronized and the buffers
// flushed, as CUPTI asks) and the next enable attaches it again.
class CuptiCollector : public gpu::ActivityCollector {
 public:
  CuptiCollector() {
    if (g_started.exchange(true)) throw std::logic_error("CUPTI activity recording is already running in this process");
  }
  ~CuptiCollector() override {
    if (attached_) {
      for (const CUpti_ActivityKind kind : kRecordedKinds) cuptiActivityDisable(kind);
      cudaDeviceSynchronize();
      cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      cuptiFinalize();
    }
    std::lock_guard lock(g_completed.mutex);
    g_completed.log = {};
    g_completed.error.clear();
    g_started = false;
  }
  CuptiCollector(const CuptiCollector&) = delete;
  CuptiCollector& operator=(const CuptiCollector&) = delete;

  void set_enabled(bool enabled) override {
    if (enabled == attached_) return;
    if (enabled) {
      attached_ = true;  // CUPTI's first call attaches it, whether or not the call succeeds
      check_cupti(cuptiActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed),
                  "cuptiActivityRegisterCallbacks");
    }
    for (const CUpti_ActivityKind kind : kRecordedKinds) {
      const std::string call = std::string(enabled ? "cuptiActivityEnable" : "cuptiActivityDisable") + "(kind " +
                               std::to_string(kind) + ")";
      check_cupti(enabled ? cuptiActivityEnable(kind) : cuptiActivityDisable(kind), call.c_str());
    }
    if (!enabled) {
      // What completed since the last flush stays in g_completed for the next one.
      check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
      check_cupti(cuptiFinalize(), "cuptiFinalize");
      attached_ = false;
    }
  }
  void push_range(std::uint64_t external_id) override {
    require_attached("push_range");
    check_cupti(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, external_id),
                "cuptiActivityPushExternalCorrelationId");
  }
  void pop_range() override {
    require_attached("pop_range");
    std::uint64_t id = 0;
    check_cupti(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id),
                "cuptiActivityPopExternalCorrelationId");
  }
  gpu::ActivityLog flush() override {
    // Detached, every record was flushed as CUPTI let go; calling it now would attach it again.
    if (attached_) check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    std::lock_guard lock(g_completed.mutex);
    if (!g_completed.error.empty()) {
      const std::string error = std::move(g_completed.error);
      g_completed.error.clear();
      throw std::runtime_error(error);
    }
    gpu::ActivityLog log = std::move(g_completed.log);
    g_completed.log = {};
    return log;
  }
  std::uint64_t now_ns() override {
    require_attached("now_ns");
    std::uint64_t t = 0;
    check_cupti(cuptiGetTimestamp(&t), "cuptiGetTimestamp");
    return t;
  }

 private:
  // Any CUPTI call attaches CUPTI: outside a recording window one would slow what follows.
  void require_attached(const char* what) const {
    if (!attached_) throw std::logic_error(std::string("CUPTI ") + what + " outside a recording window");
  }
  bool attached_ = false;
};

class CudaBackend : public gpu::GpuBackend {
 public:
  explicit CudaBackend(int device) : properties_(probe_cuda_device(device)) {}
  const core::DeviceInfo& properties() const override { return properties_; }
  void synchronize() override { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
  gpu::ActivityCollector& activities() override { return collector_; }

 private:
  core::DeviceInfo properties_;
  CuptiCollector collector_;
};

}  // namespace

std::unique_ptr<gpu::GpuBackend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace headroom::profiler::cupti
