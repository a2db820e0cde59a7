#pragma once
// Inf-CL's ring (models/ring_contrastive_loss.h) on the data-parallel workers' c10d process group:
// a shift is a send to the next rank and a receive from the previous one (Gloo's point-to-point on
// the CPU), the loss's sum an all-reduce.
#include <functional>
#include <memory>
#include <vector>

#include "executor/data_parallel.h"
#include "models/ring_contrastive_loss.h"

namespace headroom::executor {

class GroupRingPeers : public models::RingPeers {
 public:
  explicit GroupRingPeers(Workers& workers) : workers_(workers) {}
  int rank() const override { return workers_.rank(); }
  int size() const override { return workers_.size(); }
  std::unique_ptr<Transfer> shift(const torch::Tensor& out, torch::Tensor& in, int tag) override;
  void all_reduce_sum(torch::Tensor& t) override;
  std::vector<std::int64_t> all_gather(std::int64_t mine) override;

 private:
  Workers& workers_;
};

// Data parallel with a contrastive loss: the model's loss layer runs the ring over `workers` from now
// on (the peers returned must outlive its use). Null without workers or without such a layer.
std::unique_ptr<GroupRingPeers> attach_ring(models::Model& model, Workers* workers);
// The gradient-cache step's last backward runs the towers from cached embedding gradients and
// does not reach the loss layer: its parameters' gradients (the log-scale's) are final before it.
std::vector<torch::Tensor> loss_layer_parameters(const models::Model& model);
// Runs `step` with the model's loss layer off the ring (one process's loss over what it is given),
// putting the ring back however it ends.
void without_ring(models::Model& model, const std::function<void()>& step);

}  // namespace headroom::executor
