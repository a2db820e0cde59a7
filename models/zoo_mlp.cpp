#include "models/layers.h"
#include "models/zoo.h"

namespace headroom::models {

SizeEstimate estimate_mlp(const Config& config) {
  const auto input = static_cast<double>(config.positive_int("input"));
  const auto hidden = static_cast<double>(config.positive_int("hidden"));
  const auto depth = static_cast<double>(config.positive_int("depth"));
  const auto classes = static_cast<double>(config.positive_int("classes"));
  return {(input + 1) * hidden + (depth - 1) * (hidden + 1) * hidden + (hidden + 1) * classes, 4 * input * classes};
}

Model build_mlp(const Config& config, std::uint64_t seed) {
  const std::int64_t input = config.positive_int("input");
  const std::int64_t hidden = config.positive_int("hidden");
  const std::int64_t depth = config.positive_int("depth");
  const std::int64_t classes = config.positive_int("classes");

  torch::manual_seed(seed);
  Model model("mlp", config);
  int x = kModelInput;
  std::int64_t width = input;
  for (std::int64_t i = 0; i < depth; ++i) {
    const int block = static_cast<int>(i);
    const std::string prefix = "block" + std::to_string(i) + ".";
    x = add_linear(model, prefix + "fc", width, hidden, {x, block});
    x = add_gelu(model, prefix + "gelu", {x, block});
    width = hidden;
  }
  x = add_linear(model, "head", width, classes, {x});
  add_cross_entropy(model, "loss", x);

  // The task: labels are the argmax of a fixed random linear teacher, so a model can learn them.
  auto teacher_gen = at::make_generator<at::CPUGeneratorImpl>(kTaskSeed);
  const torch::Tensor teacher = torch::randn({input, classes}, teacher_gen, torch::kFloat32);
  model.set_batch_generator([input, teacher](std::int64_t batch, std::uint64_t batch_seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(batch_seed);
    Batch b;
    b.input = torch::randn({batch, input}, gen, torch::kFloat32);
    b.target = b.input.matmul(teacher).argmax(1);
    return b;
  });
  return model;
}

}  // namespace headroom::models
