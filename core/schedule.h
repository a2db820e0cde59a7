#pragma once
// One training step as tasks: each runs on a stream for a duration after its dependencies, and
// changes memory when it starts, while it runs (a transient peak) and when it ends. The planner
// builds schedules; the simulator runs them as discrete events. Identical micro-batches are one
// run of tasks with a repeat count, so a schedule's size follows the model's layers and the
// distinct micro-batch sizes, never the number of micro-batches (a contrastive step at a global
// batch of 64k may have tens of thousands).
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
// Workspace: what the device's libraries keep allocated between steps (cuBLAS's per thread and
// stream on CUDA; none on the CPU). GatheredParameter: a sharded worker's (stage 3) parameters of a
// unit (a block or a layer) gathered from their owners while the unit runs.
enum class MemoryKind { Parameter, Gradient, OptimizerState, Workspace, GatheredParameter, Input, Activation, Transient };
inline constexpr std::size_t kMemoryKinds = 8;
inline constexpr std::array<std::string_view, kMemoryKinds> kMemoryKindNames{
    "parameters", "gradients", "optimizer_state", "workspace", "gathered_parameters", "input", "activations", "transient"};
// As a legend or a tooltip names them.
inline constexpr std::array<std::string_view, kMemoryKinds> kMemoryKindLabels{
    "parameters", "gradients", "optimizer state", "library workspace", "gathered parameters", "input", "activations",
    "transient"};

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
  int micro_batch = -1;  // in a Repeat: the first repetition's; repetition r runs micro_batch + r
};

// Tasks [first_task, first_task + task_count) run `times` times back to back. A repeat runs alone:
// every task before it has finished when it starts, and no task after it starts before its last
// repetition ends. It must end at the memory, kind by kind, it started from (a micro-batch frees
// what it allocated). Together these make every repetition the first one shifted in time, which is
// what lets the simulator run it once. Dependencies inside it name the first repetition's tasks.
struct Repeat {
  int first_task = 0;
  int task_count = 0;
  std::int64_t times = 1;  // repetitions, the first one included
  bool operator==(const Repeat&) const = default;
};

struct Schedule {
  std::vector<MemoryChange> resident;  // allocated before the step and kept (parameters, ...)
  std::vector<Task> tasks;
  std::vector<Repeat> repeats;  // in task order, disjoint; a task in none runs once
  std::int64_t samples = 0;  // samples the step trains on
  // Data-parallel workers the step stands for: the tasks are worker 0's, and the collective
  // stream's all-reduces run on every worker at once (a collective starts when all have joined).
  int workers = 1;
};

}  // namespace headroom::core
