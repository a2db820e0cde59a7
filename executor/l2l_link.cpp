#include "executor/l2l_link.h"

#include <chrono>
#include <thread>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "core/errors.h"
#include "runtime/budget_allocator.h"
#include "runtime/host_copy.h"

namespace headroom::executor {

void wait_for(const std::shared_ptr<c10::Event>& event) {
  // libtorch 1.13's c10::Event cannot block the host, so poll: what is waited for (a stage's
  // compute, its gradients crossing) takes milliseconds, against which a 20 us poll is noise.
  if (!event) return;
  while (!event->query()) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

std::shared_ptr<c10::Event> L2LLink::mark_compute() const {
  if (!is_cuda()) return nullptr;
  auto mark = std::make_shared<c10::Event>(device_.type());
  mark->record(*compute_);
  return mark;
}

L2LLink::L2LLink(torch::Device device) : device_(device) {
  if (device.is_cpu()) return;
  if (!device.is_cuda()) throw core::InputError("l2l: L2L runs on the CPU or on CUDA, not on " + device.str());
  // Device-generic guard calls: the same code builds against a CPU-only libtorch.
  const c10::impl::VirtualGuardImpl impl(device.type());
  compute_.emplace(impl.getStream(device));
  inbound_.emplace(impl.getStreamFromGlobalPool(device));
  outbound_.emplace(impl.getStreamFromGlobalPool(device));
}

torch::Tensor L2LLink::host_empty(at::IntArrayRef sizes, const torch::TensorOptions& like) const {
  if (is_cuda()) return torch::empty(sizes, like.device(torch::kCPU).pinned_memory(true));
  runtime::HostScope host;
  return torch::empty(sizes, like.device(torch::kCPU));
}

torch::Tensor L2LLink::to_device_landed(const torch::Tensor& host) const {
  torch::NoGradGuard no_grad;
  if (!is_cuda()) return runtime::host_memcpy(host);
  c10::StreamGuard on_inbound(*inbound_);
  // A blocking copy waits for the inbound stream only: the compute stream runs on meanwhile.
  torch::Tensor copy = host.to(host.options().device(device_), /*non_blocking=*/false, /*copy=*/true);
  copy.record_stream(*compute_);
  return copy;
}

HostLanding L2LLink::to_host(const torch::Tensor& device) const {
  torch::NoGradGuard no_grad;
  if (!is_cuda()) {
    runtime::HostScope host;
    return {runtime::host_memcpy(device), nullptr};
  }
  order(*compute_, *outbound_);
  c10::StreamGuard on_outbound(*outbound_);
  torch::Tensor host = host_empty(device.sizes(), device.options());
  host.copy_(device, /*non_blocking=*/true);
  device.record_stream(*outbound_);
  auto landed = std::make_shared<c10::Event>(device_.type());
  landed->record(*outbound_);
  return {host, landed};
}

torch::Tensor L2LLink::stash_to_host(const torch::Tensor& device) const {
  torch::NoGradGuard no_grad;
  if (!is_cuda()) {
    runtime::HostScope host;
    return runtime::host_memcpy(device);
  }
  // Only the compute stream reads it back, after this copy: no event to wait on. The pinned
  // allocator keeps the buffer until the copy is done, however early the tensor goes.
  torch::Tensor host = host_empty(device.sizes(), device.options());
  host.copy_(device, /*non_blocking=*/true);
  return host;
}

torch::Tensor L2LLink::back_to_device(const torch::Tensor& host) const {
  torch::NoGradGuard no_grad;
  if (!is_cuda()) return runtime::host_memcpy(host);
  return host.to(host.options().device(device_), /*non_blocking=*/true, /*copy=*/true);
}

void L2LLink::order(const c10::Stream& after, const c10::Stream& stream) const {
  c10::Event done(device_.type());
  done.record(after);
  done.block(stream);
}

}  // namespace headroom::executor
