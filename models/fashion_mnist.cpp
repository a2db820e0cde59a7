#include "models/fashion_mnist.h"

#include <zlib.h>

#include <array>
#include <vector>

#include "core/errors.h"

namespace headroom::models {

namespace {

std::vector<unsigned char> read_gzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw core::InputError(path + ": cannot open (install the Debian package dataset-fashion-mnist)");
  }
  std::vector<unsigned char> data;
  std::array<unsigned char, 1 << 16> buffer{};
  int n = 0;
  while ((n = gzread(file, buffer.data(), buffer.size())) > 0) data.insert(data.end(), buffer.begin(), buffer.begin() + n);
  const bool failed = n < 0;
  gzclose(file);
  if (failed) throw core::InputError(path + ": not a readable gzip file");
  return data;
}

std::uint32_t big_endian(const std::vector<unsigned char>& d, std::size_t at) {
  return (std::uint32_t{d[at]} << 24) | (std::uint32_t{d[at + 1]} << 16) | (std::uint32_t{d[at + 2]} << 8) | d[at + 3];
}

}  // namespace

LabelledImages load_fashion_mnist(const std::string& split, const std::string& directory) {
  if (split != "train" && split != "test") throw core::InputError("Fashion-MNIST split must be train or test");
  const std::string prefix = directory + "/" + (split == "train" ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz", labels_path = prefix + "-labels-idx1-ubyte.gz";
  const auto images = read_gzip(images_path);
  const auto labels = read_gzip(labels_path);
  if (images.size() < 16 || big_endian(images, 0) != 2051) throw core::InputError(images_path + ": not an IDX image file");
  if (labels.size() < 8 || big_endian(labels, 0) != 2049) throw core::InputError(labels_path + ": not an IDX label file");
  const std::int64_t n = big_endian(images, 4), rows = big_endian(images, 8), cols = big_endian(images, 12);
  if (big_endian(labels, 4) != n || images.size() != static_cast<std::size_t>(16 + n * rows * cols) ||
      labels.size() != static_cast<std::size_t>(8 + n)) {
    throw core::InputError(prefix + ": image and label files do not match");
  }
  LabelledImages out;
  // Normalized with the training set's statistics (mean 0.2860, std 0.3530 of pixel/255).
  out.images = torch::from_blob(const_cast<unsigned char*>(images.data() + 16), {n, 1, rows, cols}, torch::kUInt8)
                   .to(torch::kFloat32)
                   .div_(255.0)
                   .sub_(0.2860)
                   .div_(0.3530);
  out.labels = torch::from_blob(const_cast<unsigned char*>(labels.data() + 8), {n}, torch::kUInt8).to(torch::kInt64);
  return out;
}

void use_dataset(Model& model, LabelledImages data) {
  if (model.name() != "cnn" || model.config().positive_int("image") != data.images.size(2) ||
      model.config().positive_int("channels") != data.images.size(1) || model.config().positive_int("classes") != 10) {
    throw core::InputError("Fashion-MNIST needs the cnn model with image=28, channels=1, classes=10");
  }
  model.set_batch_generator([data](std::int64_t batch, std::uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto index = torch::randint(data.images.size(0), {batch}, gen, torch::kInt64);
    return Batch{data.images.index_select(0, index), data.labels.index_select(0, index)};
  });
}

double accuracy(Model& model, const LabelledImages& data, std::int64_t batch_size) {
  const bool was_training = model.context().training;
  model.set_training(false);
  torch::NoGradGuard no_grad;
  const int logits_layer = static_cast<int>(model.layers().size()) - 2;  // the classifier, before the loss
  std::int64_t correct = 0;
  const std::int64_t n = data.images.size(0);
  const auto device = model.parameters().front().device();
  for (std::int64_t start = 0; start < n; start += batch_size) {
    const std::int64_t end = std::min(n, start + batch_size);
    const Batch batch{data.images.slice(0, start, end).to(device), data.labels.slice(0, start, end).to(device)};
    const auto logits = model.forward_to(batch, logits_layer);
    correct += logits.argmax(1).eq(batch.target).sum().item<std::int64_t>();
  }
  model.set_training(was_training);
  return static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace headroom::models
