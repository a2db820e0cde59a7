#pragma once
// What executing a plan showed (schema headroom.report/1): predicted and measured side by side,
// their relative errors, the gradient check, and what went wrong if a step ran out of memory.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/calibration.h"
#include "core/precision.h"
#include "core/step_figures.h"

namespace headroom::core {

inline constexpr std::string_view kReportSchema = "headroom.report/1";

using Measurement = StepFigures;

struct GradientCheck {
  bool computed = false;
  double max_rel_diff = 0;  // max over parameters of |accumulated - full batch|_inf / |full batch|_inf
  std::string note;         // how it was computed, or why not
  // In a precision other than fp32, where the plan's and the full batch's roundings differ, the same
  // measure against the full batch run in float32 on the same weights: the plan's gradients, and the
  // full batch's in the plan's precision (what the precision itself costs). Both or neither.
  std::optional<double> float32_max_rel_diff;
  std::optional<double> reference_float32_max_rel_diff;
};

struct OutOfMemory {
  std::string layer;  // the layer running when the budget refused an allocation ("" outside layers)
  std::string phase;  // forward, backward, recompute, optimizer, data
  int micro_batch = -1;
  std::int64_t requested_bytes = 0;
  std::int64_t in_use_bytes = 0;
  std::int64_t budget_bytes = 0;
};

// What the host held for a CPU run beyond the bytes libtorch's allocator handed out (the budget's
// count): the C allocator's resident heap, free pages included (the CPU's counterpart of CUDA's
// reserved bytes), and the process's whole resident set. Measured over the measured steps: the
// resident set after every micro-batch and optimizer step, the heap after every step (between
// hand-backs it only grows, as headroom's regime keeps freed pages; core/host_memory.h).
struct HostMemoryReport {
  std::int64_t resident_start_bytes = 0;  // the process's resident set when the run's memory accounting began
  std::int64_t resident_peak_bytes = 0;   // its highest sample
  std::int64_t heap_start_bytes = 0;      // malloc's resident heap when the run's memory accounting began
  std::int64_t heap_peak_bytes = 0;       // its highest sample
  std::int64_t heap_free_bytes = 0;       // at that sample, resident but not handed out
  int trims = 0;  // times free heap was handed back to keep the run's heap within its budget
  bool operator==(const HostMemoryReport&) const = default;
};

// A data-parallel run (executor/data_parallel.h): what each worker measured, and the checks across workers.
struct DataParallelWorker {
  int rank = 0;
  std::int64_t samples = 0;     // its share of the global batch
  std::int64_t peak_bytes = 0;  // its measured peak under its own budget
  double step_seconds = 0;      // its median step
  // Its median wait, after its last backward, for the buckets' all-reduces still running (and the
  // sums written back): the all-reduce the backward did not hide.
  double allreduce_wait_seconds = 0;
  // The CPUs it may run on: `execute --devices N` binds each worker to its share of the launcher's.
  int cpus = 0;
  bool operator==(const DataParallelWorker&) const = default;
};
struct DataParallelReport {
  int world_size = 1;
  std::string backend;  // c10d's process group: gloo or nccl
  std::int64_t buckets = 0;
  std::int64_t bucket_bytes = 0;  // each worker's communication buffers
  int weight_checks = 0;          // times every worker's weights were compared bit for bit (and agreed)
  // The weights after the run against the same steps run by one process on the full batch (dropout
  // off throughout), when asked for: max over parameters of |a - b|_inf / |b|_inf.
  std::optional<double> full_batch_weights_max_rel_diff;
  // The plan's all-reduce for worker 0: every bucket's ring time, and what the last backward does not hide.
  double predicted_allreduce_seconds = 0;
  double predicted_exposed_allreduce_seconds = 0;
  std::vector<DataParallelWorker> workers;
  // ZeRO's stage the run sharded at (core/sharding.h), and sharded, worker 0's parameter broadcast
  // after the optimizer (median over the measured steps) beside the plan's.
  int shard_stage = 0;
  double broadcast_seconds = 0;
  double predicted_broadcast_seconds = 0;
  // Stage 2: how long worker 0 waits for its gradients' reduces over a step (median), beside the
  // plan's (its exposed_gradient_reduce_seconds).
  double gradient_reduce_seconds = 0;
  double predicted_gradient_reduce_seconds = 0;
  std::int64_t gradient_reduces = 0;  // the collectives worker 0's reduces started in its last step
  // Stage 3: how long worker 0 waits in its parameter gathers over a step (median), beside the
  // plan's (its exposed_parameter_gather_seconds).
  double gather_seconds = 0;
  double predicted_gather_seconds = 0;
  bool operator==(const DataParallelReport&) const = default;
};

// An L2L run (executor/l2l_execute.h): the device held the running stages, the host everything else.
struct L2LReport {
  bool boundaries_on_host = false;
  int stages = 0;
  int kept_stages = 0;  // from a chosen block on: the stages before it, kept on the device
  std::int64_t largest_stage_parameter_bytes = 0;
  // Parameters, gradients, optimizer state (and stashed boundaries, with boundaries on the host):
  // the planner's figure, and the highest the host scope held over the measured steps.
  std::int64_t predicted_host_bytes = 0;
  std::int64_t measured_host_peak_bytes = 0;
  // Where a step's time went, per lane (seconds a step, medians over the measured steps), beside the
  // planner's lanes: the compute thread's forward, recompute and backward, zeroing gradients and
  // the kept stages' optimizer steps; the copies of parameters, gradients and stashed boundaries;
  // the compute thread's waits for a copy or the host optimizer; the host optimizer's steps. Absent
  // (negative) in reports from before.
  struct Lanes {
    double compute_seconds = -1, copy_seconds = -1, wait_seconds = -1, host_optimizer_seconds = -1;
    bool operator==(const Lanes&) const = default;
  };
  Lanes measured, predicted;
  bool operator==(const L2LReport&) const = default;
};

struct Report {
  std::string plan_path;
  std::string model;
  std::string device;             // "cpu" or "cuda"
  std::string device_name;
  std::int64_t budget_bytes = 0;  // enforced budget (0: none)
  std::int64_t global_batch = 0;
  std::vector<std::int64_t> micro_batches;
  std::vector<int> checkpointed_blocks;
  int steps = 0;                  // measured steps (after warm-up)
  std::string status;             // "ok" or "out_of_memory"
  Measurement predicted;
  Measurement measured;
  std::int64_t measured_reserved_bytes = 0;  // CUDA's caching allocator; 0 on the CPU
  double peak_rel_error = 0;        // (predicted - measured) / measured: above 0 is predicted too high
  double throughput_rel_error = 0;  // likewise for samples/s
  GradientCheck gradient_check;
  std::optional<OutOfMemory> out_of_memory;
  std::vector<std::string> warnings;
  std::vector<double> step_seconds;  // every measured step
  int threads = 0;                   // intra-op threads the steps ran with (0: not recorded)
  Precision precision = Precision::Fp32;  // the step's (the plan's and its trace's)
  // The machine the predicted times hold for (the plan's), and this one timed right before the
  // warm-up and right after the last step: a run on a machine whose speed moved is said to be.
  std::optional<Calibration> predicted_calibration;
  std::optional<Calibration> calibration_before;
  std::optional<Calibration> calibration_after;
  std::string data = "synthetic";     // where the batches came from
  std::optional<double> test_accuracy;  // after training, on real data
  // The host-memory regime the run was in (core/host_memory.h); empty in reports from before it was recorded.
  std::string host_memory_regime;
  std::optional<HostMemoryReport> host_memory;  // CPU runs that measured steps
  std::optional<DataParallelReport> data_parallel;
  std::optional<L2LReport> l2l;
};

nlohmann::json to_json(const Report& report);
// Validates the whole document; throws InputError "<source>: <json path>: <problem>".
Report report_from_json(const nlohmann::json& document, std::string_view source = "report");
Report read_report_file(const std::filesystem::path& path);
void write_report_file(const std::filesystem::path& path, const Report& report);

}  // namespace headroom::core
