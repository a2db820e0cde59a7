#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "core/errors.h"
#include "executor/plan_runner.h"
#include "models/fashion_mnist.h"
#include "models/zoo.h"

namespace headroom {
namespace {

TEST(FashionMnist, LoadsDebiansFiles) {
  const auto train = models::load_fashion_mnist("train");
  EXPECT_EQ(train.images.sizes(), (std::vector<std::int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(train.labels.min().item<std::int64_t>(), 0);
  EXPECT_EQ(train.labels.max().item<std::int64_t>(), 9);
  EXPECT_NEAR(train.images.mean().item<double>(), 0.0, 0.01);  // normalized with its own statistics
  EXPECT_EQ(models::load_fashion_mnist("test").images.size(0), 10000);
  EXPECT_THROW(models::load_fashion_mnist("train", "/nonexistent"), core::InputError);
  EXPECT_THROW(models::load_fashion_mnist("validation"), core::InputError);
}

// Five SGD steps on Fashion-MNIST: micro-batches (loss weights b_i/B) and the full batch end with the
// same weights when BatchNorm normalizes with running statistics (eval style), and not when it
// normalizes each micro-batch with its own.
TEST(FashionMnist, MicroBatchesAndTheFullBatchEndWithTheSameWeights) {
  const auto train = models::load_fashion_mnist("train");
  const auto final_difference = [&](bool batchnorm_eval) {
    const auto make = [&] {
      auto model = models::build_zoo_model("cnn", {{"width", "8"}, {"stages", "2"}}, 1);
      models::use_dataset(model, train);
      model.set_training(true);
      model.set_batchnorm_eval(batchnorm_eval);
      return model;
    };
    models::Model micro = make(), full = make();
    torch::optim::SGD micro_sgd(micro.parameters(), 0.05), full_sgd(full.parameters(), 0.05);
    executor::Position position;
    executor::PlanRunner runner(micro, {}, position);
    for (std::uint64_t step = 0; step < 5; ++step) {
      const auto batches = executor::make_micro_batches(micro, {20, 20, 20, 4}, step, torch::kCPU);
      micro_sgd.zero_grad();
      runner.accumulate(batches, 64);
      micro_sgd.step();
      full_sgd.zero_grad();
      full.forward(executor::concatenate(batches)).backward();
      full_sgd.step();
    }
    std::vector<torch::Tensor> a, b;
    for (const auto& p : micro.parameters()) a.push_back(p.detach());
    for (const auto& p : full.parameters()) b.push_back(p.detach());
    return executor::max_relative_difference(a, b);
  };
  EXPECT_LT(final_difference(true), 1e-5);
  EXPECT_GT(final_difference(false), 1e-3);
}

}  // namespace
}  // namespace headroom
