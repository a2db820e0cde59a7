#pragma once
// Data parallel's gradient exchange as plain numbers: the link the workers all-reduce
// over, the ring all-reduce's cost on it, and how gradients are grouped into buckets. Torch-free,
// so the planner, the simulator's schedule and the executor group gradients the same way.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/precision.h"

namespace headroom::core {

// One link of the ring: what one worker sends to the next per second, and the latency of a message.
struct CollectiveLink {
  double bytes_per_second = 0;
  std::int64_t latency_ns = 0;
  std::string source;  // "measured" (headroom profile over loopback) or "given" (--link)
  // A collective's own time between two workers, latency + bytes / bandwidth, where measured
  // (`profile --measure-link`: the broadcast, reduce and gather a sharded step runs); unmeasured (0),
  // one message of the link above.
  struct Line {
    double bytes_per_second = 0;
    std::int64_t latency_ns = 0;
    bool known() const { return bytes_per_second > 0; }
    bool operator==(const Line&) const = default;
  };
  Line broadcast{};
  Line reduce{};
  // Stage 3's gather of a unit, a broadcast as the executor runs it: into memory allocated for it,
  // its owner's values copied in first. Unmeasured, the broadcast's line.
  Line gather{};
  // Of a collective's time, the share a worker's compute loses while the collective runs beside it
  // (a prefetched gather, a bucket's all-reduce or a reduce during backward). Measured, where the
  // collectives' threads share the cores with the compute's (Gloo workers filling a CPU's cores),
  // near 1 or above: overlapping hides nothing. 0 where the link runs apart from the compute, and
  // for a given link (--link).
  double beside_compute = 0;
  static constexpr double kMostBesideCompute = 2;
  bool operator==(const CollectiveLink&) const = default;
  bool known() const { return bytes_per_second > 0; }
};

// Parses "25GB/s,5us": a bandwidth (B/s with k/M/G decimal or Ki/Mi/Gi binary prefixes) and a
// latency (ns, us, ms or s). Throws InputError naming the text and the accepted form.
CollectiveLink parse_link(std::string_view text);
// "25.0 GB/s, 5.00 us".
std::string format_link(const CollectiveLink& link);

// `messages` messages (or copies) moving `bytes` in all over a link: each one's latency plus the
// bytes at the bandwidth, saturating. The bandwidth must be positive.
std::int64_t transfer_ns(std::int64_t bytes, double bytes_per_second, std::int64_t latency_ns, std::int64_t messages = 1);

// What a data-parallel plan predicts of worker 0's all-reduce for execute's report to set beside
// what it measures (core::Plan::predicted_parts): every bucket's ring time, and how far the last one
// ends past the last backward (the time the optimizer waits for it).
inline constexpr std::string_view kAllReduceSecondsPart = "allreduce_seconds";
inline constexpr std::string_view kExposedAllReduceSecondsPart = "exposed_allreduce_seconds";
// ... and what its compute loses to the collectives that run beside it (CollectiveLink::beside_compute).
inline constexpr std::string_view kComputeBesideCollectivesSecondsPart = "compute_beside_collectives_seconds";

// The most workers a plan (its world_size), a plan request or an execution may name.
inline constexpr int kMaxWorkers = 4096;
// The default bucket size, PyTorch DDP's (25 MiB).
inline constexpr std::int64_t kDefaultBucketCapBytes = std::int64_t{25} << 20;

// A ring all-reduce of `bytes` over `workers`: reduce-scatter then all-gather, 2(N-1) steps, each
// sending one N-th of the buffer and paying the latency once. 0 for one worker.
std::int64_t ring_allreduce_ns(std::int64_t bytes, int workers, const CollectiveLink& link);

// Gradients are exchanged in buckets of whole layers, from the last layer to the first (the order
// backward produces them): a bucket closes once it holds at least `cap_bytes`. Layers without
// parameters belong to none.
struct GradientBucket {
  int first_layer = 0;  // the lowest layer id in it: its gradient is the bucket's last to be ready
  int last_layer = 0;
  std::int64_t bytes = 0;
  bool operator==(const GradientBucket&) const = default;
};
// `layer_bytes[i]`: layer i's gradient bytes. Buckets in the order they become ready.
std::vector<GradientBucket> gradient_buckets(const std::vector<std::int64_t>& layer_bytes, std::int64_t cap_bytes);

// How many bytes a gradient of `gradient_bytes` takes in its bucket's buffer and on the wire: a bf16
// step's bfloat16 gradients are widened to float32 over Gloo (whose all-reduce in libtorch 1.13 has
// no bfloat16 sum; the sum is float32's, rounded once as it is written back), twice their bytes;
// NCCL sums bfloat16 as it is, and every other precision's gradients are float32.
bool widens_gradients_for_allreduce(Precision precision, bool cuda);
std::int64_t allreduce_gradient_bytes(std::int64_t gradient_bytes, Precision precision, bool cuda);

}  // namespace headroom::core
