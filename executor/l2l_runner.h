#pragma once
// L2L (Pudipeddi et al.): parameters, gradients and optimizer state live on the host (the
// "eager param server"); the device holds only the stage running and the next one's parameters,
// prefetched on a copy thread. Forward runs stage s over every micro-batch before stage s+1,
// stashing what later stages read; backward runs the stages in reverse, re-running each stage's
// forward from its stashed inputs (with the forward's RNG state, so dropout draws the same masks),
// copies the stage's gradients to the host, and a host optimizer thread steps that stage while the
// device works on the one before.
//
// A stage is a model block (consecutive layers with one block id), and each run of layers outside
// any block (embeddings, head and loss) is a stage too. l2l_link.h says what "host" and a copy
// are on the CPU (a runtime::HostScope, counted apart from the budget) and on CUDA (pinned memory,
// copy streams).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/l2l_stages.h"
#include "executor/plan_runner.h"
#include "executor/l2l_link.h"
#include "models/model.h"

namespace headroom::executor {

struct L2LOptions {
  torch::Device device = torch::kCPU;  // where the stages compute (the CPU or CUDA)
  std::string optimizer = "adam";  // sgd or adam, as runtime::make_optimizer builds them
  // L2L's constant-memory variant: stashed stage boundaries (and their gradients) wait on the host,
  // so device memory does not grow with depth at all.
  bool boundaries_on_host = false;
  // The next stage's parameters are copied on a copy thread while the current one computes; off,
  // the copy happens when the stage is needed.
  bool prefetch = true;
  // The stage's compute starts once the next stage's copy has landed, so the device holds both
  // stages' parameters at every peak, as the planner's model assumes (an upper bound that a copy
  // landing late undercuts): deterministic peaks for measuring prediction against measurement. On a
  // CPU the copy is then made on the compute thread, which would wait for it anyway.
  bool settle_prefetch = false;
  // Emulates a slower host-to-device link (bytes/s; 0: as fast as memcpy): each copy to the device
  // (a stage's parameters, and in the constant-memory variant the boundaries brought back) takes at
  // least its bytes at this rate, so a step can be made transfer-bound on purpose. CPU only: on CUDA
  // the copies are asynchronous, and a host-side wait would not slow them.
  double copy_bytes_per_second = 0;
  // On CUDA the host optimizer steps a stage on its own thread while the device computes the
  // previous one; on a CPU it steps on the compute thread, in between (it would share the cores).
  bool overlap_optimizer = true;
  // L2L from a chosen block on (L2LChoice::from_block): the stages before that block's stay on the
  // device with their gradients and optimizer (stepped on the device after their backward).
  int from_block = core::L2LChoice::kWholeModel;
};

class L2LRunner {
 public:
  // Moves the offloaded stages' parameters to the host (their device storage is released), the kept
  // ones' to the device (the model may have been built on the host), and builds one optimizer per
  // stage. Throws InputError when a parameter belongs to no layer or to layers of two stages (tied
  // weights), which L2L cannot keep in one place, when the model has no block from_block, or
  // for an emulated link rate on CUDA.
  L2LRunner(models::Model& model, L2LOptions options, Position& position);
  ~L2LRunner();
  L2LRunner(const L2LRunner&) = delete;
  L2LRunner& operator=(const L2LRunner&) = delete;

  // One optimizer step over the micro-batches (each mean loss weighted b_i / B). Returns the loss.
  double step(const std::vector<models::Batch>& micro_batches, std::int64_t global_batch);
  // The same forward and backward without the optimizer: the gradients stay on the host
  // (host_gradients()), for checking against ordinary training.
  double accumulate(const std::vector<models::Batch>& micro_batches, std::int64_t global_batch);

  // The weights training has produced, in model.parameters() order: host copies, and a kept
  // stage's own parameters on the device.
  const std::vector<torch::Tensor>& host_parameters() const { return masters_; }
  std::vector<torch::Tensor> host_gradients() const;
  int stage_count() const { return static_cast<int>(stages_.size()); }
  int kept_stage_count() const;
  // Parameter bytes of the largest offloaded stage: what one stage's copy costs on the device.
  std::int64_t largest_stage_parameter_bytes() const;

  // Copies the host weights back into the model's own parameters (on the device), e.g. to
  // evaluate or checkpoint after training; L2L must not step again afterwards.
  void restore_model_parameters();

  // Where the last step()'s time went, in seconds, lane by lane as the planner predicts them:
  // the compute thread's forward, recompute and backward, zeroing the stages' gradients, and the
  // kept stages' optimizer steps (wall time on the compute thread: on CUDA, launching them);
  // the copies, wherever they ran; the compute thread's waits for a copy or the host optimizer;
  // the host optimizer's steps (with adding the arrived gradients), wherever they ran.
  struct LaneTimes {
    double compute = 0, copy = 0, wait = 0, host_optimizer = 0;
  };
  LaneTimes last_step_lanes() const;

 private:
  // Adds the time from its construction to its end to `into` (from any thread).
  class Timed {
   public:
    explicit Timed(std::atomic<std::int64_t>& into) : into_(into), start_(std::chrono::steady_clock::now()) {}
    ~Timed() {
      into_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
    }
    Timed(const Timed&) = delete;
    Timed& operator=(const Timed&) = delete;

   private:
    std::atomic<std::int64_t>& into_;
    std::chrono::steady_clock::time_point start_;
  };
  mutable std::atomic<std::int64_t> compute_ns_{0}, copy_ns_{0}, wait_ns_{0}, host_optimizer_ns_{0};

  // A stage as core::l2l_stages forms it (first and last layer, inputs, exports), and what the
  // runner keeps of it.
  struct Stage : core::L2LStage {
    std::vector<int> parameters;  // indices into slots_/masters_
    bool kept = false;            // stays on the device (before from_block)
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    // A offloaded stage's parameters packed in one buffer (one copy each way), parameter k at
    // offsets[k] with shapes[k]: on the host (the masters view it), on the device while loaded
    // (the slots view it), and its gradients on the device during its backward.
    std::vector<std::int64_t> offsets;
    std::vector<std::vector<std::int64_t>> shapes;
    torch::Tensor host_flat, device_flat, device_gradients;
    // The stage's parameters as views of a packed buffer.
    std::vector<torch::Tensor> views(const torch::Tensor& flat) const;
  };

  // The constructor's phases. Forms the stages and keeps those before from_block; returns each
  // layer's stage.
  std::vector<int> form_stages();
  // Each parameter's stage (by index into slots_); throws for tied weights across stages.
  std::vector<int> assign_parameters(const std::vector<int>& stage_of);
  void place_kept_parameters(const std::vector<int>& owner);
  void pack_on_host(Stage& stage);
  void build_optimizers();

  // One step() or accumulate(), phase by phase (l2l_runner.cpp).
  class Step;
  double run(const std::vector<models::Batch>& micro_batches, std::int64_t global_batch, bool optimize);
  // The stage's packed parameters copied to the device on the calling thread (undefined: none).
  torch::Tensor copy_to_device(int stage) const;
  // `after`: the device's mark at the end of the stage before the one running (null on the CPU);
  // the copy waits for it, as the planner's lanes order it, so the compute thread, which only
  // enqueues on CUDA, cannot run stages ahead and pile up device memory the allocator keeps for
  // work still queued.
  void start_prefetch(int stage, const std::shared_ptr<c10::Event>& after = nullptr);
  void load(int stage);
  void unload(int stage);
  void offload_gradients_and_step(int stage, bool optimize);
  void wait_for_optimizer();
  // Runs the stage's layers on one micro-batch; `outputs` holds earlier stages' stashed outputs and
  // receives this stage's exports (and the loss, for the last stage).
  torch::Tensor run_stage(const Stage& stage, const models::Batch& batch, std::vector<torch::Tensor>& outputs,
                          bool recomputing);
  torch::Tensor to_stash(const torch::Tensor& tensor) const;
  // A stashed boundary (or its gradient) brought back to the device, at the emulated link's rate,
  // in the constant-memory variant; otherwise the stash is on the device already.
  torch::Tensor from_stash(const torch::Tensor& tensor) const;
  // Adds a gradient (on the device) into a stashed one.
  void add_to_stash(torch::Tensor& stashed, const torch::Tensor& gradient) const;
  // Waits until `bytes` copied since `start` took what the emulated link takes.
  void at_link_rate(std::chrono::steady_clock::time_point start, std::int64_t bytes) const;

  models::Model& model_;
  L2LOptions options_;
  Position& position_;
  L2LLink link_;
  std::vector<torch::Tensor> slots_;    // the model's parameters: device storage while loaded, empty otherwise
  std::vector<torch::Tensor> masters_;  // host copies, views of their stage's host_flat (a kept stage's: the slots themselves)
  std::vector<Stage> stages_;
  std::vector<int> first_reader_stage_;  // per layer: the earliest later stage that reads its output (-1 none)
  int prefetching_ = -1;
  std::future<torch::Tensor> prefetch_;
  // Per stage: the landing of its gradients' copy to the host this step (CUDA; null on the CPU).
  std::vector<std::shared_ptr<c10::Event>> gradients_sent_;
  std::vector<std::shared_future<void>> optimizer_steps_;
};

}  // namespace headroom::executor
