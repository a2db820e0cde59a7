#pragma once
// Facts about the machine a trace was recorded on.
#include <string>

#include "core/trace.h"

namespace headroom::runtime {

core::DeviceInfo cpu_device_info();
// "2026-11-22T01:46:49Z"
std::string utc_timestamp_now();

}  // namespace headroom::runtime
