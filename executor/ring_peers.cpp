#include "executor/ring_peers.h"

#include "executor/grad_cache.h"

#include <stdexcept>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace headroom::executor {

namespace {

class GroupTransfer : public models::RingPeers::Transfer {
 public:
  GroupTransfer(c10::intrusive_ptr<c10d::Work> send, c10::intrusive_ptr<c10d::Work> receive)
      : send_(std::move(send)), receive_(std::move(receive)) {}
  void wait() override {
    wait_collective(receive_, "the ring loss's receive");
    wait_collective(send_, "the ring loss's send");
  }

 private:
  c10::intrusive_ptr<c10d::Work> send_, receive_;
};

}  // namespace

std::unique_ptr<models::RingPeers::Transfer> GroupRingPeers::shift(const torch::Tensor& out, torch::Tensor& in, int tag) {
  const int n = size(), next = (rank() + 1) % n, previous = (rank() + n - 1) % n;
  std::vector<at::Tensor> outgoing{out}, incoming{in};
  auto send = named_as_collective("the ring loss's send", [&] { return workers_.group().send(outgoing, next, tag); });
  auto receive =
      named_as_collective("the ring loss's receive", [&] { return workers_.group().recv(incoming, previous, tag); });
  return std::make_unique<GroupTransfer>(std::move(send), std::move(receive));
}

void GroupRingPeers::all_reduce_sum(torch::Tensor& t) {
  std::vector<at::Tensor> tensors{t};
  wait_collective(workers_.group().allreduce(tensors), "the ring loss's sum");
}

std::vector<std::int64_t> GroupRingPeers::all_gather(std::int64_t mine) {
  std::vector<std::int64_t> out;
  for (const auto& v : workers_.gather({static_cast<double>(mine)})) out.push_back(static_cast<std::int64_t>(v[0]));
  return out;
}

std::unique_ptr<GroupRingPeers> attach_ring(models::Model& model, Workers* workers) {
  const int loss = contrastive_layer(model);
  if (workers == nullptr || loss < 0) return nullptr;
  auto peers = std::make_unique<GroupRingPeers>(*workers);
  model.layers()[static_cast<std::size_t>(loss)].contrastive->ring = peers.get();
  return peers;
}

std::vector<torch::Tensor> loss_layer_parameters(const models::Model& model) {
  const int loss = contrastive_layer(model);
  if (loss < 0) return {};
  return model.layers()[static_cast<std::size_t>(loss)].parameters;
}

void without_ring(models::Model& model, const std::function<void()>& step) {
  const int loss = contrastive_layer(model);
  if (loss < 0) return step();
  models::ContrastiveLossSettings& settings = *model.layers()[static_cast<std::size_t>(loss)].contrastive;
  struct Restore {
    models::ContrastiveLossSettings& settings;
    models::RingPeers* ring;
    ~Restore() { settings.ring = ring; }
  } restore{settings, settings.ring};
  settings.ring = nullptr;
  step();
}

}  // namespace headroom::executor
