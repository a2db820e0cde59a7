#include "runtime/host_info.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

namespace {

// The CPU's flags line, as words.
std::vector<std::string> cpu_flags() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::vector<std::string> out;
    for (std::string word; words >> word;) out.push_back(word);
    return out;
  }
  return {};
}

// Whether DNNL_MAX_CPU_ISA keeps oneDNN below the bfloat16 instructions (AVX2, AVX512_CORE, ...).
bool isa_capped_below_bf16() {
  const char* cap = std::getenv("DNNL_MAX_CPU_ISA");
  if (cap == nullptr || *cap == '\0') return false;
  std::string isa(cap);
  std::transform(isa.begin(), isa.end(), isa.begin(), [](unsigned char c) { return std::toupper(c); });
  return isa.find("BF16") == std::string::npos && isa.find("AMX") == std::string::npos && isa != "ALL";
}

}  // namespace

bool cpu_has_native_bf16() {
  if (isa_capped_below_bf16()) return false;
  const auto flags = cpu_flags();
  return std::any_of(flags.begin(), flags.end(), [](const std::string& f) { return f == "avx512_bf16" || f == "amx_bf16"; });
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

CpuUsage cpu_usage_now() {
  CpuUsage usage;
  usage.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const bool masked = ::sched_getaffinity(0, sizeof allowed, &allowed) == 0;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::ifstream stat("/proc/stat");
  std::string line;
  while (std::getline(stat, line)) {
    // Per-core lines only ("cpu0 ..."); the first, "cpu ", sums them all.
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream fields(line.substr(3));
    int core = 0;
    long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    fields >> core >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
    if (!fields || (masked && !CPU_ISSET(core, &allowed))) continue;
    // Steal is time the hypervisor gave this core to another machine: busy as far as we can tell.
    usage.busy_s += static_cast<double>(user + nice + system + irq + softirq + steal) / tick;
    usage.known = true;
  }
  rusage own{};
  if (::getrusage(RUSAGE_SELF, &own) == 0) {
    const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
    usage.own_s = seconds(own.ru_utime) + seconds(own.ru_stime);
  }
  return usage;
}

static std::optional<double> assumed_cores_busy_with_others() {
  const char* set = std::getenv(kAssumedOthersVariable);
  if (set == nullptr || *set == '\0') return std::nullopt;
  char* end = nullptr;
  const double cores = std::strtod(set, &end);
  if (*end == '\0' && std::isfinite(cores) && cores >= 0) return cores;
  static const bool warned = [&] {
    std::fprintf(stderr, "headroom: warning: %s=%s is not a number of cores (0 or more): ignored\n", kAssumedOthersVariable,
                 set);
    return true;
  }();
  (void)warned;
  return std::nullopt;
}

double cores_busy_with_others(const CpuUsage& before, const CpuUsage& after) {
  if (const auto assumed = assumed_cores_busy_with_others()) return *assumed;
  const double wall = after.wall_s - before.wall_s;
  if (!before.known || !after.known || wall <= 0) return 0;
  const double others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s);
  return std::max(0.0, others / wall);
}

int cores_taken(double busy_with_others) { return std::max(0, static_cast<int>(std::ceil(busy_with_others - 0.5))); }

std::string shared_with_others(const CpuUsage& before, const CpuUsage& after, int threads) {
  const double others = cores_busy_with_others(before, after);
  if (cores_taken(others) == 0 || usable_cores() - cores_taken(others) >= threads) return "";
  char line[96];
  std::snprintf(line, sizeof line, "%s%.1f cores busy on average", kSharedWithOthers, others);
  return line;
}

IdleCores measure_idle_cores(std::chrono::milliseconds window) {
  IdleCores cores;
  cores.usable = usable_cores();
  const CpuUsage before = cpu_usage_now();
  std::this_thread::sleep_for(window);
  cores.busy_with_others = cores_busy_with_others(before, cpu_usage_now());
  cores.idle = std::clamp(cores.usable - cores_taken(cores.busy_with_others), 1, cores.usable);
  return cores;
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
