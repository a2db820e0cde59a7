#include "core/host_memory.h"

#include <dlfcn.h>
#include <link.h>
#include <gnu/libc-version.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <string_view>
#include <filesystem>
#include <mutex>
#include <stdexcept>

namespace headroom::core {

namespace {

std::atomic<bool> g_entered{false};

// The shared object that provides `malloc` to this process: glibc's, or one preloaded over it. The
// first loaded object after the program that defines it, in the dynamic linker's search order: the
// address RTLD_DEFAULT gives can be the program's own PLT entry (a non-PIE program, such as Debian's
// python3, that takes malloc's address), which names the program rather than the allocator. (An
// allocator linked into the program itself reads as the library after it.)
std::string malloc_provider() {
  void* program = ::dlopen(nullptr, RTLD_LAZY | RTLD_NOLOAD);
  if (program == nullptr) return "unknown";
  std::string provider = "unknown";
  link_map* map = nullptr;
  if (::dlinfo(program, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr) {
    for (const link_map* object = map->l_next; object != nullptr; object = object->l_next) {
      if (object->l_name == nullptr || object->l_name[0] == '\0') continue;  // the vDSO
      void* handle = ::dlopen(object->l_name, RTLD_LAZY | RTLD_NOLOAD);
      if (handle == nullptr) continue;
      // dlsym on a handle searches the object's dependencies too: the definition must be its own.
      void* symbol = ::dlsym(handle, "malloc");
      Dl_info info{};
      const bool defines = symbol != nullptr && ::dladdr(symbol, &info) != 0 && info.dli_fname != nullptr &&
                           std::string_view(info.dli_fname) == object->l_name;
      ::dlclose(handle);
      if (defines) {
        provider = std::filesystem::path(object->l_name).filename().string();
        break;
      }
    }
  }
  ::dlclose(program);
  return provider;
}

bool glibc_malloc() { return malloc_provider().rfind("libc.so", 0) == 0; }

std::string glibc_name() { return std::string("glibc ") + ::gnu_get_libc_version() + " malloc"; }

}  // namespace

std::string headroom_regime() {
  if (!glibc_malloc()) return malloc_provider() + " malloc";
  return glibc_name() + ", mmap_threshold=" + std::to_string(kMmapThreshold) + ", trim_threshold=" +
         std::to_string(kTrimThreshold);
}

std::string regime_of_process() {
  if (glibc_malloc() && !g_entered.load()) return glibc_name() + ", dynamic thresholds";
  return headroom_regime();
}

std::string enter_host_memory_regime() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!glibc_malloc()) return;  // another allocator's thresholds are not ours to set
    // Fixing either threshold also stops glibc from moving the mmap threshold on its own.
    if (::mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThreshold)) != 1 ||
        ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThreshold)) != 1) {
      throw std::runtime_error("host-memory regime: glibc refused mallopt(M_MMAP_THRESHOLD/M_TRIM_THRESHOLD)");
    }
    g_entered.store(true);
  });
  return regime_of_process();
}

std::string regime_mismatch_warning(const std::string& recorded, const std::string& current) {
  if (recorded == current) return {};
  return "the trace was measured in another host-memory regime (" + (recorded.empty() ? std::string(kUnrecordedRegime) : recorded) +
         ") than this run's (" + current +
         "): its times may not hold here; profile again in this regime";
}

std::int64_t resident_bytes() {
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  long long pages = 0, resident = 0;
  const bool read = statm != nullptr && std::fscanf(statm, "%lld %lld", &pages, &resident) == 2;
  if (statm != nullptr) std::fclose(statm);
  if (!read) throw std::runtime_error("host memory: cannot read /proc/self/statm");
  return resident * static_cast<std::int64_t>(::sysconf(_SC_PAGESIZE));
}

namespace {

// The "Rss:" of the [heap] mapping in /proc/self/smaps; 0 before the heap exists.
std::int64_t main_heap_resident_bytes() {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) throw std::runtime_error("host memory: cannot read /proc/self/smaps");
  std::string line;
  bool in_heap = false;
  while (std::getline(smaps, line)) {
    // Mapping headers start with an address range; field lines with a capitalised name.
    const bool header = !line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') < line.find(' ');
    if (header) {
      in_heap = line.size() >= 6 && line.compare(line.size() - 6, 6, "[heap]") == 0;
    } else if (in_heap && line.rfind("Rss:", 0) == 0) {
      return std::stoll(line.substr(4)) * 1024;  // "Rss:   1234 kB"
    }
  }
  return 0;
}

}  // namespace

HostMemoryUsage host_memory_usage() {
  HostMemoryUsage usage;
  usage.resident_bytes = resident_bytes();
  const struct mallinfo2 info = ::mallinfo2();
  usage.heap_resident_bytes = main_heap_resident_bytes() + static_cast<std::int64_t>(info.hblkhd);
  usage.malloc_in_use_bytes = static_cast<std::int64_t>(info.uordblks + info.hblkhd);
  return usage;
}

bool release_free_host_memory() { return ::malloc_trim(0) == 1; }

namespace {

// The first whole number in `path`'s first line, or nothing ("max" in a cgroup file).
std::optional<std::int64_t> read_number(const std::string& path) {
  std::ifstream file(path);
  std::string word;
  if (!(file >> word) || word.empty() || !std::isdigit(static_cast<unsigned char>(word[0]))) return std::nullopt;
  try {
    return std::stoll(word);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::int64_t available_host_memory_bytes() {
  std::int64_t available = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      available = std::stoll(line.substr(13)) * 1024;  // "MemAvailable:   1234 kB"
      break;
    }
  }
  // cgroup v2: this process's group, as /proc/self/cgroup names it ("0::/path").
  std::ifstream cgroup("/proc/self/cgroup");
  while (std::getline(cgroup, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string dir = "/sys/fs/cgroup" + line.substr(3);
    const auto max = read_number(dir + "/memory.max");
    const auto current = read_number(dir + "/memory.current");
    if (max && current) {
      const std::int64_t left = std::max<std::int64_t>(0, *max - *current);
      available = available > 0 ? std::min(available, left) : left;
    }
  }
  return available;
}

}  // namespace headroom::core
