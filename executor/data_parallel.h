#pragma once
// Data-parallel execution on c10d, PyTorch's own distributed engine: the workers' process
// group (Gloo over loopback on the CPU; NCCL on CUDA where libtorch was built with it), the gradient
// exchange in buckets that starts during the last micro-batch's backward, and the checks that keep
// the workers honest (same weights after every step).
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <torch/version.h>

#include "core/collective.h"
#include "core/sharding.h"
#include "executor/plan_runner.h"
#include "models/model.h"

namespace c10d {
class ProcessGroup;
class Backend;
class Work;
}  // namespace c10d

namespace headroom::executor {

// What runs the collectives. Since torch 2.0, Gloo's and NCCL's groups are c10d::Backend (a
// ProcessGroup dispatches to them); in 1.13 they were process groups themselves.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveGroup = c10d::Backend;
#else
using CollectiveGroup = c10d::ProcessGroup;
#endif

// Runs a collective's `transfer` (posting it, or waiting for it); its failure names itself as a
// collective's, which the launcher tells from a worker that failed on its own (cli/worker_launch.h).
// Gloo throws either when a transfer is posted (the peer's connection already reset) or when it is
// waited for.
template <typename F>
auto named_as_collective(const std::string& what, F transfer) {
  const auto failed = [&](const std::string& why) {
    return std::runtime_error("collective failed in " + what + " (another worker stopped?): " + why);
  };
  try {
    return transfer();
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    throw failed(message.substr(0, message.find('\n')));
  } catch (const std::exception& e) {
    throw failed(e.what());
  }
}

// Waits for a collective, named as above.
void wait_collective(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what);

// Who this worker is and how it finds the others.
struct WorkerIdentity {
  int rank = 0;
  int workers = 1;  // c10d's world size
  // "file:PATH" (a c10d::FileStore, what `execute --devices N` uses) or "tcp:HOST:PORT" (a
  // c10d::TCPStore served by rank 0, for workers launched by hand).
  std::string store;
  // How long a collective may wait for the others before it fails (a worker that hangs).
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};
};

// Measures the link between two Gloo workers over loopback on this host (two threads of this
// process, each its own process group): all-reduces, broadcasts, reduces and stage 3's gathers (a
// broadcast into fresh memory) of 4 KiB to 16 MiB, each between two pieces of compute as a step
// waits for them, fitted to latency + bytes / bandwidth (the all-reduce as the two-worker ring's
// 2 * latency), and what the compute loses to each running beside it (CollectiveLink::beside_compute).
core::CollectiveLink measure_loopback_link();

// Checks a store address; throws InputError naming `store` and the accepted forms.
void check_store_address(const std::string& store);

class Workers {
 public:
  // Joins the group: blocks until every rank has joined (or the timeout passes). Throws
  // InputError for a bad address or a device without a backend, std::runtime_error when joining fails.
  Workers(const WorkerIdentity& identity, torch::Device device);
  ~Workers();
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  int rank() const { return identity_.rank; }
  int size() const { return identity_.workers; }
  const std::string& backend() const { return backend_; }
  CollectiveGroup& group() { return *group_; }

  // Every worker's `mine` (the same length on all), rank by rank.
  std::vector<std::vector<double>> gather(const std::vector<double>& mine);
  // Gloo's worker thread holds a collective's tensors until it takes the next one: a collective of
  // a tensor made as the workers joined, so that the last one's are let go of.
  void release_last_collective();
  // Throws std::runtime_error naming the ranks whose parameters differ from rank 0's, bit for bit.
  void check_weights_agree(const std::vector<torch::Tensor>& parameters, const std::string& when);
  // The same for a digest of them each worker made (WeightsDigest).
  void check_digests_agree(std::int64_t digest, const std::string& when);

 private:
  WorkerIdentity identity_;
  std::string backend_;
  std::shared_ptr<CollectiveGroup> group_;
  // The weights check's buffers, made once as the workers join (before the run's memory is
  // counted): Gloo's worker thread may let go of a collective's tensors only after the next step
  // has begun, where fresh ones would count against it.
  torch::Tensor digest_;
  std::vector<torch::Tensor> digests_;
};

// 64-bit FNV-1a over tensors' bytes, in the order added.
class WeightsDigest {
 public:
  void add(const torch::Tensor& tensor);
  std::int64_t value() const;

 private:
  std::uint64_t hash_ = 1469598103934665603ull;
};

// Gradients in buckets of whole layers (core::gradient_buckets, as the planner groups them), each
// with its own communication buffer. While armed, a bucket's all-reduce starts as soon as backward
// has accumulated the last of its gradients, in bucket order; finish() waits for them and writes the
// sums back. With loss weights b_i / B over the global batch the sum is the full batch's gradient,
// so the scale after the wait is 1.
class GradientSync {
 public:
  // Throws InputError when the model's parameters are not held by its layers (a TorchScript module).
  GradientSync(const models::Model& model, Workers& workers, std::int64_t bucket_cap_bytes);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // The next backward is the step's last: its gradients go out as they become ready. `final_already`:
  // parameters whose gradient is complete before it and that it does not reach (a gradient-cache
  // step's loss layer, whose log-scale gets its gradient from the loss over the whole batch).
  void arm(const std::vector<torch::Tensor>& final_already = {});
  // Waits for every bucket (starting those backward did not) and writes the sums to the gradients;
  // returns the seconds that took.
  double finish();
  std::size_t bucket_count() const;
  std::int64_t buffer_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// ZeRO's stages 1 and 2 on one worker (core/sharding.h): the trainable parameters are moved into
// one flat buffer, every parameter a view of its range, so that a worker's range of the parameters
// is one tensor. Its optimizer steps that range alone, in pieces of at most
// core::kShardedOptimizerPieceElements, and keeps state for them alone; then every worker's range
// is broadcast from its owner, in place, so that every worker holds every updated parameter.
// - Stage 1: the gradients live in one flat buffer too (each parameter's gradient a view of its
//   range), all-reduced as at stage 0 (GradientSync); the pieces' gradients are views of it.
// - Stage 2: a worker keeps the gradients of its range alone. As backward makes a parameter's
//   gradient (its accumulator's hook), it is copied into one of two buffers and let go, and every
//   worker starts reducing it to the owner(s) of its elements while backward goes on; before a
//   buffer takes the next gradient its reduces are waited for, and an owner adds the sums into its
//   range's gradient. The collectives run in the same order on every worker (backward's order).
// - Stage 3: as stage 2, and each unit's trainable parameters (a block's or a layer's, as the plan
//   gathers: core::parameter_units) live in a buffer of their own whose memory is let go of between
//   the unit's uses: gathered (a broadcast from each owner of its part) before its forward,
//   recompute or backward (the next unit's started as one is taken), let go of after its last
//   layer's forward and once backward has made its last gradient. The worker's range is
//   a tensor of its own, which the optimizer steps: nothing is broadcast after it. The memory goes, not the storage object, so what autograd saved
//   of a parameter reads the gathered values again in backward, as FSDP does.
class ShardedParameters final : public LayerParameterHooks {
 public:
  // Throws InputError where a trainable parameter is not float32 or the model's layers do not hold
  // every trainable parameter.
  ShardedParameters(const models::Model& model, Workers& workers, int stage, core::GatherUnit gather);
  ~ShardedParameters() override;
  ShardedParameters(const ShardedParameters&) = delete;
  ShardedParameters& operator=(const ShardedParameters&) = delete;

  // What this worker's optimizer steps: its range, in pieces.
  const std::vector<torch::Tensor>& owned_pieces() const;
  // Zeroes the gradients (stage 1: makes each parameter's gradient its view of the flat buffer again,
  // as the gradient check lets go of them; stage 2: the range's) and, at stage 2, starts reducing
  // the gradients backward makes.
  void start_step();
  // Every micro-batch's backward has run: stage 2 stops reducing, and checks each backward reduced
  // every parameter. Returns the seconds the step's reduces took (0 at stage 1).
  double finish_backward();
  // Stage 2: the collectives the step's reduces started so far.
  std::int64_t reduces_started() const;
  // Stage 2, for the gradient check: every parameter's whole gradient, gathered from its owners;
  // stage 3 also every unit's parameters, which release_all lets go of.
  void gather_for_check();
  // Every worker's range from its owner; returns the seconds that took (0 at stage 3).
  double broadcast();

  // Stage 3: LayerParameterHooks, and the seconds the compute waited in gathers since start_step.
  // A layer with parameters takes its unit's (core::parameter_units): gathered by the first of its
  // layers to run, let go of after the last one's forward and once backward has made the unit's last
  // gradient. A micro-batch gathers its units in the order the first one did; each gather but its
  // first is started as the one before it is taken (prefetched one ahead), so at most two units'
  // parameters are gathered for the work at once, besides those a recompute keeps for its backward.
  void begin_micro_batch() override;
  void before(int layer) override;
  void after_forward(int layer) override;
  // Gathers only for a unit whose backward reads its parameters (core::backward_reads_parameters).
  void before_backward(int layer) override;
  double gather_seconds() const;
  // Every unit's parameters gathered (the run is over: worker 0 compares them), or let go of.
  void gather_all();
  void release_all();
  // Every unit's parameters gathered in turn into a digest (each let go of again unless it was held).
  std::int64_t gathered_digest();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace headroom::executor
