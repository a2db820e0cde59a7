#pragma once
// The host-memory regime: how the C allocator under libtorch's CPU allocator gets memory from the
// system and keeps it. It decides how fast CPU training runs: glibc's default raises its
// mmap threshold only as large blocks are freed, so a tensor of a few MiB is mmapped and
// page-faulted afresh on every allocation until then, and one of 32 MiB or more always is. A step
// that starts cold and one that runs warm differ severalfold (docs/design.md, "The host-memory
// regime"), so the profiler and the executor must run in the same regime, and a trace says which
// one it was measured in.
//
// headroom's regime is glibc's malloc with both thresholds fixed at start-up (mallopt): blocks below
// kMmapThreshold come from the heap and are reused warm, and up to kTrimThreshold of free heap is
// kept instead of being handed back and faulted in again. Chosen by measurement over tcmalloc and
// jemalloc (docs/results.md, "Host-memory regime"); no allocator is written here.
//
// Torch-free (mallopt, mallinfo2, /proc): the plan command compares regimes without libtorch.
#include <cstdint>
#include <optional>
#include <string>

namespace headroom::core {

inline constexpr std::int64_t kMmapThreshold = std::int64_t{1} << 30;  // 1 GiB
inline constexpr std::int64_t kTrimThreshold = std::int64_t{1} << 30;  // 1 GiB (mallopt takes an int)

// Puts this process in headroom's regime (idempotent) and returns regime_of_process(). Throws
// std::runtime_error when the allocator refuses the settings. Under an allocator other than glibc's
// (LD_PRELOAD) nothing can be set: the description says which allocator it is, and a trace or report
// records that instead.
std::string enter_host_memory_regime();

// The regime this process is in: "glibc 2.36 malloc, mmap_threshold=1073741824, trim_threshold=1073741824"
// once entered; "glibc 2.36 malloc, dynamic thresholds" before; "libtcmalloc_minimal.so.4 malloc"
// when another library provides malloc.
std::string regime_of_process();

// The regime headroom's profile and execute run in on this machine, whether or not this process
// entered it (the desktop app plans without running anything): what enter_host_memory_regime()
// makes regime_of_process() say. Plans compare a trace's regime with it.
std::string headroom_regime();

// What a trace recorded before traces recorded a regime: glibc's default.
inline constexpr const char* kUnrecordedRegime = "not recorded (glibc's default dynamic thresholds)";

// A warning when a trace's regime is not this process's, empty when they agree. `recorded` is the
// trace's field (empty for a trace from before it existed).
std::string regime_mismatch_warning(const std::string& recorded, const std::string& current);

// The process's memory as the system and the C allocator see it, now.
struct HostMemoryUsage {
  std::int64_t resident_bytes = 0;       // the process's resident set (VmRSS)
  // What malloc holds resident: the main heap's resident pages ("[heap]" in /proc/self/smaps; it is
  // where the thread that runs forward and backward allocates) and its mmapped blocks. Unlike
  // mallinfo's heap size it drops when free pages are handed back (malloc_trim).
  std::int64_t heap_resident_bytes = 0;
  std::int64_t malloc_in_use_bytes = 0;  // handed out to callers, all arenas and mmapped blocks
};
// Throws std::runtime_error when /proc/self cannot be read.
HostMemoryUsage host_memory_usage();
// Only the resident set: cheap enough to read after every micro-batch.
std::int64_t resident_bytes();

// What the system can still give this process: /proc/meminfo's MemAvailable, or less where this
// process's cgroup (a container's memory.max) leaves less. 0 when neither can be read.
std::int64_t available_host_memory_bytes();

// Hands free heap memory back to the system (malloc_trim); true when some was.
bool release_free_host_memory();

}  // namespace headroom::core
