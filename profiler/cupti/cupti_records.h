#pragma once
// Decoding of CUPTI activity records into plain records (profiler/gpu/activity.h). Records are
// reached through an interface, so tests feed records built in memory and need no GPU; the real
// source walks a completed CUPTI buffer.
#include <cupti_activity.h>

#include "profiler/gpu/activity.h"

namespace headroom::profiler::cupti {

// The activity kinds the collector enables. The runtime API kind is needed because CUPTI emits
// external correlation records only alongside API records.
inline constexpr CUpti_ActivityKind kRecordedKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_MEMORY2,           CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

class RecordSource {
 public:
  virtual ~RecordSource() = default;
  // The next record, or nullptr at the end.
  virtual const CUpti_Activity* next() = 0;
};

// Adds one record to the log. Runtime API records carry nothing we keep; a kind that was not
// enabled is an error (std::logic_error), since silently skipping it would hide lost work.
void decode_record(const CUpti_Activity& record, gpu::ActivityLog& log);

gpu::ActivityLog decode_records(RecordSource& source);

gpu::CopyActivity::Kind copy_kind(std::uint8_t cupti_copy_kind);

}  // namespace headroom::profiler::cupti
