#include "models/layers.h"
#include "models/zoo.h"

namespace headroom::models {

SizeEstimate estimate_cnn(const Config& config) {
  const auto image = static_cast<double>(config.positive_int("image"));
  const auto channels = static_cast<double>(config.positive_int("channels"));
  const auto width = static_cast<double>(config.positive_int("width"));
  const std::int64_t stages = config.positive_int("stages");
  const auto blocks = static_cast<double>(config.positive_int("blocks"));
  const auto classes = static_cast<double>(config.positive_int("classes"));
  // Convolutions have no bias; a BatchNorm has a scale and a shift per channel (parameters) and a
  // running mean and variance per channel and a step count (what it builds besides).
  double parameters = 9 * channels * width + 2 * width;  // the stem
  double batchnorm_bytes = 8 * width + 8;
  double in = width;
  for (std::int64_t s = 0; s < stages && parameters < 1e30; ++s) {
    const double out = s == 0 ? width : 2 * in;
    parameters += 9 * in * out + 9 * out * out + 4 * out + (blocks - 1) * (18 * out * out + 4 * out);
    batchnorm_bytes += 2 * blocks * (8 * out + 8);
    if (s > 0) {  // the first block of a later stage halves the resolution: its skip is projected
      parameters += in * out + 2 * out;
      batchnorm_bytes += 8 * out + 8;
    }
    in = out;
  }
  parameters += (in + 1) * classes;
  return {parameters, 4 * classes * channels * image * image + batchnorm_bytes};
}

Model build_cnn(const Config& config, std::uint64_t seed) {
  const std::int64_t image = config.positive_int("image");
  const std::int64_t channels = config.positive_int("channels");
  const std::int64_t width = config.positive_int("width");
  const std::int64_t stages = config.positive_int("stages");
  const std::int64_t blocks = config.positive_int("blocks");
  const std::int64_t classes = config.positive_int("classes");

  torch::manual_seed(seed);
  Model model("cnn", config);
  int x = add_conv(model, "stem.conv", channels, width, 3, 1, {kModelInput});
  x = add_batchnorm(model, "stem.bn", width, {x});
  x = add_relu(model, "stem.relu", {x});

  std::int64_t in_ch = width;
  int block = 0;
  for (std::int64_t s = 0; s < stages; ++s) {
    const std::int64_t out_ch = width << s;
    for (std::int64_t k = 0; k < blocks; ++k, ++block) {
      const std::int64_t stride = (s > 0 && k == 0) ? 2 : 1;
      const std::string p = "stage" + std::to_string(s) + ".block" + std::to_string(k) + ".";
      const int block_input = x;
      int y = add_conv(model, p + "conv1", in_ch, out_ch, 3, stride, {block_input, block});
      y = add_batchnorm(model, p + "bn1", out_ch, {y, block});
      y = add_relu(model, p + "relu1", {y, block});
      y = add_conv(model, p + "conv2", out_ch, out_ch, 3, 1, {y, block});
      y = add_batchnorm(model, p + "bn2", out_ch, {y, block});
      int skip = block_input;
      if (stride != 1 || in_ch != out_ch) {
        skip = add_conv(model, p + "down.conv", in_ch, out_ch, 1, stride, {block_input, block});
        skip = add_batchnorm(model, p + "down.bn", out_ch, {skip, block});
      }
      y = add_residual(model, p + "add", y, skip, block);
      x = add_relu(model, p + "relu2", {y, block});
      in_ch = out_ch;
    }
  }
  x = add_global_pool(model, "pool", {x});
  x = add_linear(model, "fc", in_ch, classes, {x});
  add_cross_entropy(model, "loss", x);

  // The task: each class has a fixed random template; an image is its class template plus noise.
  auto template_gen = at::make_generator<at::CPUGeneratorImpl>(kTaskSeed);
  const torch::Tensor templates = torch::randn({classes, channels, image, image}, template_gen, torch::kFloat32);
  model.set_batch_generator([classes, templates](std::int64_t batch, std::uint64_t batch_seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(batch_seed);
    Batch b;
    b.target = torch::randint(classes, {batch}, gen, torch::kInt64);
    const auto noise = torch::randn({batch, templates.size(1), templates.size(2), templates.size(3)}, gen,
                                    torch::kFloat32);
    b.input = templates.index_select(0, b.target) + 0.5 * noise;
    return b;
  });
  return model;
}

}  // namespace headroom::models
