#pragma once
// Fashion-MNIST from Debian's dataset-fashion-mnist (gzipped IDX files): 60,000 training and 10,000
// test images of 28x28 pixels in 10 classes. Real data for the `cnn` model.
#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "models/model.h"

namespace headroom::models {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct LabelledImages {
  torch::Tensor images;  // [N, 1, 28, 28] float, normalized with the training set's mean and std
  torch::Tensor labels;  // [N] int64
};

// `split` is "train" or "test". Throws InputError naming the file if it is missing or malformed.
LabelledImages load_fashion_mnist(const std::string& split, const std::string& directory = kFashionMnistDir);

// Makes `model` (a cnn of 1x28x28 images and 10 classes) draw its batches from `data`: a batch seed
// picks the samples, so the same seeds give the same images.
void use_dataset(Model& model, LabelledImages data);

// Share of `data` that `model` (in eval mode) classifies right.
double accuracy(Model& model, const LabelledImages& data, std::int64_t batch_size = 1000);

}  // namespace headroom::models
