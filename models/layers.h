#pragma once
// Building blocks for models: each call appends one layer to a Model and returns its id. The zoo
// is written with these, and tests use them to build small stacks whose memory is computed by hand.
#include <cstdint>
#include <string>

#include "models/model.h"

namespace headroom::models {

struct Place {
  int input;       // the layer (or kModelInput) it reads
  int block = -1;  // the block it belongs to
};

int add_linear(Model& model, const std::string& name, std::int64_t in_features, std::int64_t out_features, Place at,
               bool bias = true);
int add_gelu(Model& model, const std::string& name, Place at);
int add_relu(Model& model, const std::string& name, Place at);
int add_layernorm(Model& model, const std::string& name, std::int64_t features, Place at);
int add_dropout(Model& model, const std::string& name, double p, Place at);
// Elementwise sum of two earlier outputs (a residual connection).
int add_residual(Model& model, const std::string& name, int a, int b, int block);
int add_conv(Model& model, const std::string& name, std::int64_t in_channels, std::int64_t out_channels,
             std::int64_t kernel, std::int64_t stride, Place at);
int add_batchnorm(Model& model, const std::string& name, std::int64_t channels, Place at);
// Global average pool over H and W, flattened to [B, C].
int add_global_pool(Model& model, const std::string& name, Place at);
// Multi-head attention core on a fused [B, S, 3H] q|k|v input: scores, softmax, dropout, ·V,
// heads merged back to [B, S, H]. `causal` masks future positions.
int add_attention(Model& model, const std::string& name, std::int64_t hidden, std::int64_t heads, double dropout,
                  bool causal, std::int64_t seq, Place at);
// Mean cross-entropy of logits [N, C] (or [B, S, C]) against the batch target.
int add_cross_entropy(Model& model, const std::string& name, int logits);
// Mean squared error of the input against the batch target.
int add_mse_loss(Model& model, const std::string& name, int prediction);

}  // namespace headroom::models
