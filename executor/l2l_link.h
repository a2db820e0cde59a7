#pragma once
// How L2L (l2l_runner.h) moves tensors between the host and the device.
//
// On the CPU the device and the host are one heap: host storage is what is allocated inside a
// runtime::HostScope (counted apart from the budget), and a copy is a clone.
//
// On CUDA host storage is pinned (so copies run at the link's speed and overlap compute).
// Parameters come in on an inbound copy stream, from L2L's copy thread, which waits for each
// copy to land. Gradients and stashed boundaries go out, and boundaries come back, on an outbound
// copy stream ordered against the compute stream by events, so the compute thread never waits for
// them on the host. Tensors used on a stream other than the one that allocated them are recorded
// on it, so the caching allocator does not hand their memory out again while a copy still reads it.
#include <memory>
#include <optional>

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/torch.h>

namespace headroom::executor {

// Blocks the calling thread until the device has reached `event` (null: nothing to wait for).
void wait_for(const std::shared_ptr<c10::Event>& event);

// A copy to the host: `host` holds the data once wait() returns.
struct HostLanding {
  torch::Tensor host;
  std::shared_ptr<c10::Event> landed;  // null when the copy was done on return (the CPU)
  void wait() const { wait_for(landed); }
};

class L2LLink {
 public:
  // The compute stream is the one current on the constructing thread. Throws InputError for a
  // device that is neither the CPU nor CUDA.
  explicit L2LLink(torch::Device device);
  torch::Device device() const { return device_; }
  bool is_cuda() const { return device_.is_cuda(); }

  // Uninitialized host storage: pinned on CUDA, inside a HostScope on the CPU.
  torch::Tensor host_empty(at::IntArrayRef sizes, const torch::TensorOptions& like) const;
  // A host tensor's copy on the device, landed when this returns, usable on the compute stream.
  // Any thread may call it (L2L's copy thread does).
  torch::Tensor to_device_landed(const torch::Tensor& host) const;
  // A device tensor's copy to the host, after the compute enqueued so far; in flight on CUDA until
  // the landing's wait().
  HostLanding to_host(const torch::Tensor& device) const;
  // A stashed boundary's copy to the host and back, in the compute's order (the compute stream on
  // CUDA, the compute thread on the CPU): the stage's turn includes them, as the planner times it,
  // and they never queue behind a stage's parameters or gradients on the copy streams.
  torch::Tensor stash_to_host(const torch::Tensor& device) const;
  torch::Tensor back_to_device(const torch::Tensor& host) const;
  // The point the compute enqueued so far reaches on the device (null on the CPU, whose compute is
  // done when enqueued): L2L's copy thread waits for it before it allocates.
  std::shared_ptr<c10::Event> mark_compute() const;

 private:
  // Makes `stream` wait for the work enqueued on `after` so far.
  void order(const c10::Stream& after, const c10::Stream& stream) const;

  torch::Device device_;
  std::optional<c10::Stream> compute_, inbound_, outbound_;  // CUDA only
};

}  // namespace headroom::executor
