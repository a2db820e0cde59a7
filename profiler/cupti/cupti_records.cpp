#include "profiler/cupti/cupti_records.h"

#include <cupti_version.h>

#include <stdexcept>
#include <string>

// The record structs are versioned; these are CUDA 13's (CUPTI API 130000 and later).
#if CUPTI_API_VERSION < 130000
#error "headroom's CUPTI decoder needs the CUDA 13 toolkit's CUPTI (CUpti_ActivityKernel10)"
#endif

namespace headroom::profiler::cupti {

gpu::CopyActivity::Kind copy_kind(std::uint8_t cupti_copy_kind) {
  switch (cupti_copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return gpu::CopyActivity::Kind::HostToDevice;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return gpu::CopyActivity::Kind::DeviceToHost;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return gpu::CopyActivity::Kind::DeviceToDevice;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return gpu::CopyActivity::Kind::PeerToPeer;
    default: return gpu::CopyActivity::Kind::Other;
  }
}

void decode_record(const CUpti_Activity& record, gpu::ActivityLog& log) {
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& k = reinterpret_cast<const CUpti_ActivityKernel10&>(record);
      log.kernels.push_back({k.name != nullptr ? k.name : "(unnamed kernel)", k.start, k.end, k.deviceId, k.streamId,
                             k.correlationId});
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& c = reinterpret_cast<const CUpti_ActivityMemcpy6&>(record);
      log.copies.push_back({copy_kind(c.copyKind), c.bytes, c.start, c.end, c.deviceId, c.streamId, c.correlationId});
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemset4&>(record);
      log.copies.push_back(
          {gpu::CopyActivity::Kind::Memset, m.bytes, m.start, m.end, m.deviceId, m.streamId, m.correlationId});
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemory4&>(record);
      if (m.memoryKind != CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) return;  // pinned host buffers are not device memory
      if (m.memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION &&
          m.memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) {
        return;
      }
      log.memory.push_back({m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, m.address,
                            m.bytes, m.timestamp, m.deviceId, m.correlationId});
      return;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto& e = reinterpret_cast<const CUpti_ActivityExternalCorrelation&>(record);
      if (e.externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) log.external_ids[e.correlationId] = e.externalId;
      return;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
      return;
    default:
      throw std::logic_error("CUPTI delivered an activity record of kind " + std::to_string(record.kind) +
                             ", which headroom did not enable");
  }
}

gpu::ActivityLog decode_records(RecordSource& source) {
  gpu::ActivityLog log;
  while (const CUpti_Activity* record = source.next()) decode_record(*record, log);
  return log;
}

}  // namespace headroom::profiler::cupti
