#pragma once
// One training step as tasks: each runs on a stream for a duration after its dependencies, and
// changes memory when it starts, while it runs (a transient peak) and when it ends. The planner
// builds schedules; the simulator runs them as discrete events.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace headroom::core {

// Where a task runs. Copies overlap compute on their own streams (L2L prefetches the next layer's
// parameters host-to-device and sends gradients device-to-host); the host runs L2L's optimizer;
// collectives (data parallel's gradient all-reduce) run beside compute on the communication stream.
enum class Stream { Compute, HostToDevice, DeviceToHost, Host, Collective };
inline constexpr std::array<std::string_view, 5> kStreamNames{"compute", "host-to-device", "device-to-host", "host",
                                                              "collective"};

// What a block of memory is, for the stacked memory timeline.
enum class MemoryKind { Parameter, Gradient, OptimizerState, Input, Activation, Transient };
inline constexpr std::size_t kMemoryKinds = 6;
inline constexpr std::array<std::string_view, kMemoryKinds> kMemoryKindNames{
    "parameters", "gradients", "optimizer_state", "input", "activations", "transient"};

struct MemoryChange {
  MemoryKind kind = MemoryKind::Activation;
  std::int64_t bytes = 0;  // positive: allocated, negative: freed
};

struct Task {
  std::string name;
  std::string category;  // forward, backward, recompute, optimizer, ...
  Stream stream = Stream::Compute;
  std::int64_t duration_ns = 0;
  std::vector<int> dependencies;  // indices of earlier tasks that must finish first
  std::vector<MemoryChange> at_start;
  std::int64_t transient_bytes = 0;  // extra bytes held while the task runs, on top of at_start
  std::vector<MemoryChange> at_end;
  int layer = -1;
  int micro_batch = -1;
};

struct Schedule {
  std::vector<MemoryChange> resident;  // allocated before the step and kept (parameters, ...)
  std::vector<Task> tasks;
  std::int64_t samples = 0;  // samples the step trains on
};

}  // namespace headroom::core
