#include "runtime/host_info.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <thread>

namespace headroom::runtime {

core::DeviceInfo cpu_device_info() {
  core::DeviceInfo info;
  info.kind = "cpu";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) info.name = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  }
  if (info.name.empty()) info.name = "cpu";
  info.name += " (" + std::to_string(std::thread::hardware_concurrency()) + " cores)";
  info.total_memory_bytes = static_cast<std::int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  return info;
}

std::string utc_timestamp_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

}  // namespace headroom::runtime
