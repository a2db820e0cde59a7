#include "models/layers.h"

#include "models/tempo_layers.h"

#include <cmath>
#include <limits>

namespace headroom::models {

namespace {

int add(Model& model, const std::string& name, const std::string& kind, std::vector<int> inputs, int block,
        LayerForward forward, std::vector<torch::Tensor> parameters = {}, LayerForward tempo_forward = {}) {
  Layer layer;
  layer.name = name;
  layer.kind = kind;
  layer.inputs = std::move(inputs);
  layer.block = block;
  layer.forward = std::move(forward);
  layer.parameters = std::move(parameters);
  layer.tempo_forward = std::move(tempo_forward);
  return model.add_layer(std::move(layer));
}

}  // namespace

int add_linear(Model& model, const std::string& name, std::int64_t in_features, std::int64_t out_features, Place at,
               bool bias) {
  auto linear = model.register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in_features, out_features).bias(bias)));
  return add(
      model, name, "linear", {at.input}, at.block,
      [linear = linear.ptr()](const std::vector<torch::Tensor>& in, const RunContext&) { return linear->forward(in[0]); },
      linear->parameters());
}

int add_gelu(Model& model, const std::string& name, Place at) {
  return add(
      model, name, "gelu", {at.input}, at.block,
      [](const std::vector<torch::Tensor>& in, const RunContext&) { return torch::gelu(in[0]); }, {},
      [](const std::vector<torch::Tensor>& in, const RunContext&) { return tempo_gelu(in[0]); });
}

int add_relu(Model& model, const std::string& name, Place at) {
  return add(model, name, "relu", {at.input}, at.block,
             [](const std::vector<torch::Tensor>& in, const RunContext&) { return torch::relu(in[0]); });
}

int add_layernorm(Model& model, const std::string& name, std::int64_t features, Place at) {
  auto norm = model.register_module(name, torch::nn::LayerNorm(torch::nn::LayerNormOptions({features})));
  return add(
      model, name, "layernorm", {at.input}, at.block,
      [norm = norm.ptr()](const std::vector<torch::Tensor>& in, const RunContext&) { return norm->forward(in[0]); },
      norm->parameters(),
      [norm = norm.ptr()](const std::vector<torch::Tensor>& in, const RunContext&) {
        return tempo_layer_norm(in[0], norm->weight, norm->bias, norm->options.eps());
      });
}

int add_dropout(Model& model, const std::string& name, double p, Place at) {
  return add(model, name, "dropout", {at.input}, at.block,
             [p](const std::vector<torch::Tensor>& in, const RunContext& ctx) {
               return torch::dropout(in[0], p, ctx.training && ctx.dropout);
             });
}

int add_residual(Model& model, const std::string& name, int a, int b, int block) {
  return add(model, name, "add", {a, b}, block,
             [](const std::vector<torch::Tensor>& in, const RunContext&) { return in[0] + in[1]; });
}

int add_conv(Model& model, const std::string& name, std::int64_t in_channels, std::int64_t out_channels,
             std::int64_t kernel, std::int64_t stride, Place at) {
  // No bias: every conv here is followed by BatchNorm, whose shift makes a bias redundant.
  auto conv = model.register_module(
      name, torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, out_channels, kernel)
                                  .stride(stride)
                                  .padding(kernel / 2)
                                  .bias(false)));
  return add(
      model, name, "conv", {at.input}, at.block,
      [conv = conv.ptr()](const std::vector<torch::Tensor>& in, const RunContext&) { return conv->forward(in[0]); },
      conv->parameters());
}

int add_batchnorm(Model& model, const std::string& name, std::int64_t channels, Place at) {
  auto norm = model.register_module(name, torch::nn::BatchNorm2d(channels));
  return add(
      model, name, "batchnorm", {at.input}, at.block,
      [norm = norm.ptr()](const std::vector<torch::Tensor>& in, const RunContext& ctx) {
        if (!ctx.recomputing) return norm->forward(in[0]);
        // The same normalization (batch statistics when training), with momentum 0 so the
        // running statistics stay as the first forward left them.
        return torch::batch_norm(in[0], norm->weight, norm->bias, norm->running_mean, norm->running_var,
                                 norm->is_training(), 0.0, norm->options.eps(), false);
      },
      norm->parameters());
}

int add_global_pool(Model& model, const std::string& name, Place at) {
  return add(model, name, "pool", {at.input}, at.block, [](const std::vector<torch::Tensor>& in, const RunContext&) {
    return in[0].mean({2, 3});
  });
}

int add_attention(Model& model, const std::string& name, std::int64_t hidden, std::int64_t heads, double dropout,
                  bool causal, std::int64_t seq, Place at) {
  if (hidden % heads != 0) {
    throw std::invalid_argument(name + ": hidden size " + std::to_string(hidden) + " is not divisible by " +
                                std::to_string(heads) + " heads");
  }
  // The mask is built once for the configured length; it is a constant, not a parameter.
  torch::Tensor future = causal ? torch::ones({seq, seq}, torch::kBool).triu(1) : torch::Tensor();
  const double scale = 1.0 / std::sqrt(static_cast<double>(hidden / heads));
  // Both variants share everything up to the softmax; they differ in what dropout·V keeps.
  const auto attend = [heads, dropout, scale, future](const std::vector<torch::Tensor>& in, const RunContext& ctx,
                                                      bool tempo) {
    const torch::Tensor& qkv = in[0];
    const std::int64_t b = qkv.size(0), s = qkv.size(1), h = qkv.size(2) / 3;
    // [B, S, 3, heads, d] -> [3, B, heads, S, d]. The heads are copied out explicitly: matmul would
    // copy these strided views itself, except at batch 1 where its reshape can view them, which
    // would make the bytes kept per layer non-affine in batch size.
    const auto parts = qkv.view({b, s, 3, heads, h / heads}).permute({2, 0, 3, 1, 4});
    const auto q = parts[0].contiguous(), k = parts[1].contiguous(), v = parts[2].contiguous();
    auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale;
    if (future.defined()) {
      const auto mask = future.index({torch::indexing::Slice(0, s), torch::indexing::Slice(0, s)});
      scores = scores.masked_fill(mask.to(scores.device()), -std::numeric_limits<float>::infinity());
    }
    const bool drop = ctx.training && ctx.dropout && dropout > 0;
    torch::Tensor context;
    if (tempo) {
      const auto probs = torch::softmax(scores, -1);
      const auto keep = drop ? torch::rand_like(probs) >= dropout : torch::Tensor();
      context = tempo_dropout_matmul(probs, keep, drop ? 1.0 / (1.0 - dropout) : 1.0, v);
    } else {
      context = torch::matmul(torch::dropout(torch::softmax(scores, -1), dropout, drop), v);
    }
    return context.transpose(1, 2).reshape({b, s, h});
  };
  return add(
      model, name, "attention", {at.input}, at.block,
      [attend](const std::vector<torch::Tensor>& in, const RunContext& ctx) { return attend(in, ctx, false); }, {},
      [attend](const std::vector<torch::Tensor>& in, const RunContext& ctx) { return attend(in, ctx, true); });
}

int add_cross_entropy(Model& model, const std::string& name, int logits) {
  return add(model, name, "loss", {logits, kTargetInput}, -1,
             [](const std::vector<torch::Tensor>& in, const RunContext&) {
               const auto& x = in[0];
               return torch::cross_entropy_loss(x.reshape({-1, x.size(-1)}), in[1].reshape({-1}));
             });
}

int add_mse_loss(Model& model, const std::string& name, int prediction) {
  return add(model, name, "loss", {prediction, kTargetInput}, -1,
             [](const std::vector<torch::Tensor>& in, const RunContext&) { return torch::mse_loss(in[0], in[1]); });
}

}  // namespace headroom::models
