#include "runtime/host_info.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <thread>
#include <utility>

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

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

bool set_passive_thread_pools() {
  bool changed = false;
  for (const auto& [name, value] : {std::pair{"OMP_WAIT_POLICY", "PASSIVE"}, std::pair{"OPENBLAS_THREAD_TIMEOUT", "4"}}) {
    if (std::getenv(name) != nullptr) continue;
    ::setenv(name, value, 1);
    changed = true;
  }
  return changed;
}

void run_with_passive_thread_pools(char** argv) {
  if (!set_passive_thread_pools()) return;
  ::execv("/proc/self/exe", argv);
  std::fprintf(stderr,
               "headroom: warning: could not restart with OMP_WAIT_POLICY=PASSIVE and OPENBLAS_THREAD_TIMEOUT=4 (%s): "
               "the thread pools spin\n",
               std::strerror(errno));
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
