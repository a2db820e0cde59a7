#pragma once
// What the GPU did during a profiled step, as plain records (decoded from CUPTI's activity buffers
// by profiler/cupti), and how it is attributed to layers. Nothing here needs CUDA, CUPTI or torch,
// so the attribution is tested with records built in memory.
//
// Attribution follows kineto: the profiler pushes an external correlation id around each layer's
// forward and each backward node (a "range"); CUPTI links every runtime API call made inside it
// (its correlation id) to that external id, and every kernel, copy and allocation carries the
// correlation id of the API call that caused it.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/chrome_trace.h"

namespace headroom::profiler::gpu {

enum class Phase { Forward, Backward, Optimizer };

// A kernel that ran (CUPTI's concurrent kernel record). Times in ns on CUPTI's clock.
struct KernelActivity {
  std::string name;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t device = 0;
  std::uint32_t stream = 0;
  std::uint32_t correlation_id = 0;
  bool operator==(const KernelActivity&) const = default;
};

// A memcpy or memset the GPU performed.
struct CopyActivity {
  enum class Kind { HostToDevice, DeviceToHost, DeviceToDevice, PeerToPeer, Memset, Other };
  Kind kind = Kind::Other;
  std::uint64_t bytes = 0;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t device = 0;
  std::uint32_t stream = 0;
  std::uint32_t correlation_id = 0;
  bool operator==(const CopyActivity&) const = default;
};

// A device memory allocation or release by the driver (cudaMalloc / cudaFree: the caching
// allocator growing or shrinking its reserve, not each tensor).
struct MemoryActivity {
  bool allocation = true;  // false: a release
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t time_ns = 0;
  std::uint32_t device = 0;
  std::uint32_t correlation_id = 0;
  bool operator==(const MemoryActivity&) const = default;
};

// Everything decoded from one step's activity buffers.
struct ActivityLog {
  std::vector<KernelActivity> kernels;
  std::vector<CopyActivity> copies;
  std::vector<MemoryActivity> memory;
  // CUPTI correlation id -> the external id that was pushed when the API call was made.
  std::unordered_map<std::uint32_t, std::uint64_t> external_ids;
  std::uint64_t dropped_records = 0;

  void append(ActivityLog&& other);
};

// The ranges pushed during a step: external id == index + 1 (0 means "no range").
class RangeTable {
 public:
  struct Range {
    int layer = -1;  // -1: not a layer (the optimizer step, the loss gradient's seed)
    Phase phase = Phase::Forward;
  };
  std::uint64_t open(int layer, Phase phase);
  const Range* find(std::uint64_t external_id) const;
  std::size_t size() const { return ranges_.size(); }
  void clear() { ranges_.clear(); }

 private:
  std::vector<Range> ranges_;
};

// GPU work of one layer in one phase.
struct GpuWork {
  std::int64_t kernel_ns = 0;   // sum of kernel durations (overlapping kernels count each)
  std::int64_t copy_ns = 0;     // sum of memcpy and memset durations
  std::int64_t span_ns = 0;     // first start to last end over kernels, copies and memsets
  std::int64_t kernels = 0;
  std::int64_t copies = 0;
  std::int64_t malloc_bytes = 0;  // device memory the driver allocated for it (the reserve growing)
  bool operator==(const GpuWork&) const = default;
};

struct StepAttribution {
  std::vector<GpuWork> forward;   // per layer
  std::vector<GpuWork> backward;  // per layer
  GpuWork optimizer;
  GpuWork unattributed;  // activity with no range (or another layer count): reported, never dropped
  std::int64_t kernel_ns = 0;     // all kernels of the step
  std::int64_t malloc_bytes = 0;  // all device memory the driver allocated in the step
};

// Assigns each activity to the range it was launched in. Spans are computed per (layer, phase)
// from the activities themselves, so work of one layer overlapping another's is still its own.
StepAttribution attribute(const ActivityLog& log, const RangeTable& ranges, std::size_t layer_count);

// Kernel and copy lanes (one per device stream) on a Chrome trace, times relative to `origin_ns`
// (CUPTI clock) and shifted by `offset_ns`. Kernel args name the layer and phase they belong to.
void add_gpu_lanes(core::ChromeTrace& chrome, const ActivityLog& log, const RangeTable& ranges,
                   const std::vector<std::string>& layer_names, std::uint64_t origin_ns, int pid);

std::string phase_name(Phase phase);

}  // namespace headroom::profiler::gpu
