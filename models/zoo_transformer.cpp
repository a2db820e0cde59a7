#include "core/errors.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace headroom::models {

namespace {

struct TransformerSize {
  std::int64_t layers, hidden, heads, ffn, seq, vocab;
  double dropout;
};

TransformerSize read_size(const Config& config) {
  TransformerSize s{};
  s.layers = config.positive_int("layers");
  s.hidden = config.positive_int("hidden");
  s.heads = config.positive_int("heads");
  s.ffn = config.non_negative_int("ffn");
  if (s.ffn == 0) s.ffn = 4 * s.hidden;
  s.seq = config.positive_int("seq");
  s.vocab = config.positive_int("vocab");
  s.dropout = config.probability("dropout");
  if (s.hidden % s.heads != 0) {
    throw core::InputError("hidden (" + std::to_string(s.hidden) + ") must be divisible by heads (" +
                           std::to_string(s.heads) + ")");
  }
  return s;
}

// Token plus learned position embeddings of [B, S] token ids.
int add_embedding(Model& model, const TransformerSize& s) {
  auto tokens = model.register_module("embed.tokens", torch::nn::Embedding(s.vocab, s.hidden));
  auto positions = model.register_module("embed.positions", torch::nn::Embedding(s.seq, s.hidden));
  Layer layer;
  layer.name = "embed";
  layer.kind = "embedding";
  layer.inputs = {kModelInput};
  layer.forward = [tokens = tokens.ptr(), positions = positions.ptr()](const std::vector<torch::Tensor>& in, const RunContext&) {
    const auto& ids = in[0];
    return tokens->forward(ids) + positions->weight.slice(0, 0, ids.size(1));
  };
  layer.parameters = tokens->parameters();
  for (const auto& p : positions->parameters()) layer.parameters.push_back(p);
  return model.add_layer(std::move(layer));
}

// Attention sub-block: qkv projection, attention core, output projection, dropout.
int add_self_attention(Model& model, const std::string& p, const TransformerSize& s, bool causal, Place at) {
  int y = add_linear(model, p + "qkv", s.hidden, 3 * s.hidden, at);
  y = add_attention(model, p + "attention", s.hidden, s.heads, s.dropout, causal, s.seq, {y, at.block});
  y = add_linear(model, p + "attn_out", s.hidden, s.hidden, {y, at.block});
  return add_dropout(model, p + "attn_dropout", s.dropout, {y, at.block});
}

// Feed-forward sub-block: linear, GELU, linear, dropout.
int add_feed_forward(Model& model, const std::string& p, const TransformerSize& s, Place at) {
  int y = add_linear(model, p + "ffn_in", s.hidden, s.ffn, at);
  y = add_gelu(model, p + "gelu", {y, at.block});
  y = add_linear(model, p + "ffn_out", s.ffn, s.hidden, {y, at.block});
  return add_dropout(model, p + "ffn_dropout", s.dropout, {y, at.block});
}

// Embeddings, then per block: qkv, attention output, feed-forward in and out, two LayerNorms.
double transformer_parameters(const Config& config) {
  const auto layers = static_cast<double>(config.positive_int("layers"));
  const auto hidden = static_cast<double>(config.positive_int("hidden"));
  const std::int64_t ffn_setting = config.non_negative_int("ffn");
  const double ffn = ffn_setting == 0 ? 4 * hidden : static_cast<double>(ffn_setting);
  const auto seq = static_cast<double>(config.positive_int("seq"));
  const auto vocab = static_cast<double>(config.positive_int("vocab"));
  const double block = (hidden + 1) * 3 * hidden + (hidden + 1) * hidden + (hidden + 1) * ffn + (ffn + 1) * hidden + 4 * hidden;
  return (vocab + seq) * hidden + 2 * hidden + layers * block;
}

}  // namespace

SizeEstimate estimate_bert(const Config& config) {
  const auto hidden = static_cast<double>(config.positive_int("hidden"));
  const auto classes = static_cast<double>(config.positive_int("classes"));
  return {transformer_parameters(config) + (hidden + 1) * hidden + (hidden + 1) * classes, 0};
}

SizeEstimate estimate_gpt(const Config& config) {
  const auto layers = static_cast<double>(config.positive_int("layers"));
  const auto hidden = static_cast<double>(config.positive_int("hidden"));
  const auto seq = static_cast<double>(config.positive_int("seq"));
  const auto vocab = static_cast<double>(config.positive_int("vocab"));
  // The LM head has no bias; every block's causal mask is seq x seq bools.
  return {transformer_parameters(config) + hidden * vocab, layers * seq * seq};
}

Model build_bert(const Config& config, std::uint64_t seed) {
  const TransformerSize s = read_size(config);
  const std::int64_t classes = config.positive_int("classes");

  torch::manual_seed(seed);
  Model model("bert", config);
  int x = add_embedding(model, s);
  x = add_layernorm(model, "embed.ln", s.hidden, {x});
  x = add_dropout(model, "embed.dropout", s.dropout, {x});
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const int block = static_cast<int>(i);
    const std::string p = "layer" + std::to_string(i) + ".";
    // Post-LN, as in BERT: x = LN(x + Attn(x)); x = LN(x + FFN(x)).
    int y = add_self_attention(model, p, s, /*causal=*/false, {x, block});
    x = add_layernorm(model, p + "attn_ln", s.hidden, {add_residual(model, p + "attn_residual", x, y, block), block});
    y = add_feed_forward(model, p, s, {x, block});
    x = add_layernorm(model, p + "ffn_ln", s.hidden, {add_residual(model, p + "ffn_residual", x, y, block), block});
  }
  // BERT's pooler: dense + tanh on the first token.
  auto pooler = model.register_module("pooler", torch::nn::Linear(s.hidden, s.hidden));
  Layer pool;
  pool.name = "pooler";
  pool.kind = "pooler";
  pool.inputs = {x};
  pool.forward = [pooler = pooler.ptr()](const std::vector<torch::Tensor>& in, const RunContext&) {
    return torch::tanh(pooler->forward(in[0].select(1, 0)));
  };
  pool.parameters = pooler->parameters();
  x = model.add_layer(std::move(pool));
  x = add_linear(model, "classifier", s.hidden, classes, {x});
  add_cross_entropy(model, "loss", x);

  const std::int64_t seq = s.seq, vocab = s.vocab;
  model.set_batch_generator([seq, vocab, classes](std::int64_t batch, std::uint64_t batch_seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(batch_seed);
    Batch b;
    b.input = torch::randint(vocab, {batch, seq}, gen, torch::kInt64);
    // The label is the first token's id modulo the class count: learnable through the pooled token.
    b.target = b.input.select(1, 0).remainder(classes);
    return b;
  });
  return model;
}

Model build_gpt(const Config& config, std::uint64_t seed) {
  const TransformerSize s = read_size(config);

  torch::manual_seed(seed);
  Model model("gpt", config);
  int x = add_embedding(model, s);
  x = add_dropout(model, "embed.dropout", s.dropout, {x});
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const int block = static_cast<int>(i);
    const std::string p = "layer" + std::to_string(i) + ".";
    // Pre-LN, as in GPT-2: x = x + Attn(LN(x)); x = x + FFN(LN(x)).
    int y = add_layernorm(model, p + "ln1", s.hidden, {x, block});
    y = add_self_attention(model, p, s, /*causal=*/true, {y, block});
    x = add_residual(model, p + "attn_residual", x, y, block);
    y = add_layernorm(model, p + "ln2", s.hidden, {x, block});
    y = add_feed_forward(model, p, s, {y, block});
    x = add_residual(model, p + "ffn_residual", x, y, block);
  }
  x = add_layernorm(model, "ln_f", s.hidden, {x});
  x = add_linear(model, "lm_head", s.hidden, s.vocab, {x}, /*bias=*/false);
  add_cross_entropy(model, "loss", x);

  const std::int64_t seq = s.seq, vocab = s.vocab;
  model.set_batch_generator([seq, vocab](std::int64_t batch, std::uint64_t batch_seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(batch_seed);
    // Arithmetic sequences t_i = (start + i * step) mod vocab: the next token follows from the last two.
    const auto start = torch::randint(vocab, {batch, 1}, gen, torch::kInt64);
    const auto step = torch::randint(1, 8, {batch, 1}, gen, torch::kInt64);
    const auto tokens = (start + step * torch::arange(seq + 1, torch::kInt64)).remainder(vocab);
    Batch b;
    b.input = tokens.slice(1, 0, seq).contiguous();
    b.target = tokens.slice(1, 1, seq + 1).contiguous();
    return b;
  });
  return model;
}

}  // namespace headroom::models
