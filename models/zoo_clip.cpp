// The zoo's `clip`: an image tower (a small CNN) and a text tower (a Transformer encoder), each
// ending in a projection to a shared embedding space and an L2 normalization, trained by a
// symmetric contrastive loss with a learnable log-scale (Radford et al.; docs/design.md, "Inf-CL").
#include <cmath>

#include "core/errors.h"
#include "models/contrastive_loss.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace headroom::models {

namespace {

int add_normalize(Model& model, const std::string& name, int input) {
  Layer layer;
  layer.name = name;
  layer.kind = "l2norm";
  layer.inputs = {input};
  // The embedding leaves its tower in float32 in every precision, as the loss reads it
  // (models/contrastive_loss.h); the cast is nothing in fp32.
  layer.forward = [](const std::vector<torch::Tensor>& in, const RunContext&) {
    return torch::nn::functional::normalize(in[0].to(torch::kFloat), torch::nn::functional::NormalizeFuncOptions().dim(1));
  };
  return model.add_layer(std::move(layer));
}

}  // namespace

SizeEstimate estimate_clip(const Config& config) {
  const auto image = static_cast<double>(config.positive_int("image"));
  const auto channels = static_cast<double>(config.positive_int("channels"));
  const auto width = static_cast<double>(config.positive_int("width"));
  const auto seq = static_cast<double>(config.positive_int("seq"));
  const auto vocab = static_cast<double>(config.positive_int("vocab"));
  const auto hidden = static_cast<double>(config.positive_int("hidden"));
  const auto layers = static_cast<double>(config.positive_int("layers"));
  const auto dim = static_cast<double>(config.positive_int("dim"));
  const auto concepts = static_cast<double>(config.positive_int("concepts"));
  // Convolutions without bias, projections with; per encoder block: qkv, the attention output, two
  // LayerNorms and the feed-forward pair; the log-scale.
  const double image_tower = 9 * channels * width + 9 * width * 2 * width + (2 * width + 1) * dim;
  const double block = (hidden + 1) * 3 * hidden + (hidden + 1) * hidden + 4 * hidden + (hidden + 1) * 4 * hidden +
                       (4 * hidden + 1) * hidden;
  const double text_tower = (vocab + seq) * hidden + layers * block + (hidden + 1) * dim;
  // The task: fp32 image templates and int64 captions per concept.
  return {image_tower + text_tower + 1, 4 * concepts * channels * image * image + 8 * concepts * seq};
}

namespace {

struct ClipSizes {
  std::int64_t image, channels, width, seq, vocab, hidden, heads, text_layers, dim, concepts;
  double dropout;
};

ClipSizes clip_sizes(const Config& config) {
  ClipSizes s{};
  s.image = config.positive_int("image");
  s.channels = config.positive_int("channels");
  s.width = config.positive_int("width");
  s.seq = config.positive_int("seq");
  s.vocab = config.positive_int("vocab");
  s.hidden = config.positive_int("hidden");
  s.heads = config.positive_int("heads");
  s.text_layers = config.positive_int("layers");
  s.dim = config.positive_int("dim");
  s.concepts = config.positive_int("concepts");
  s.dropout = config.probability("dropout");
  if (s.hidden % s.heads != 0) {
    throw core::InputError("hidden (" + std::to_string(s.hidden) + ") must be divisible by heads (" + std::to_string(s.heads) + ")");
  }
  return s;
}

// A stem and a strided stage as one checkpointable block, pooled and projected. Returns the
// embedding's layer.
int add_image_tower(Model& model, const ClipSizes& s) {
  int x = add_conv(model, "image.conv1", s.channels, s.width, 3, 1, {kModelInput, 0});
  x = add_relu(model, "image.relu1", {x, 0});
  x = add_conv(model, "image.conv2", s.width, 2 * s.width, 3, 2, {x, 0});
  x = add_relu(model, "image.relu2", {x, 0});
  x = add_global_pool(model, "image.pool", {x});
  x = add_linear(model, "image.proj", 2 * s.width, s.dim, {x});
  return add_normalize(model, "image.norm", x);
}

// The captions (the batch's target) as token and position embeddings.
int add_text_embedding(Model& model, const ClipSizes& s) {
  auto tokens = model.register_module("text.tokens", torch::nn::Embedding(s.vocab, s.hidden));
  auto positions = model.register_module("text.positions", torch::nn::Embedding(s.seq, s.hidden));
  Layer embed;
  embed.name = "text.embed";
  embed.kind = "embedding";
  embed.inputs = {kTargetInput};
  embed.forward = [tokens = tokens.ptr(), positions = positions.ptr()](const std::vector<torch::Tensor>& in,
                                                                        const RunContext&) {
    return tokens->forward(in[0]) + positions->weight.slice(0, 0, in[0].size(1));
  };
  embed.parameters = tokens->parameters();
  for (const auto& p : positions->parameters()) embed.parameters.push_back(p);
  return model.add_layer(std::move(embed));
}

// Embeddings, post-LN encoder blocks (one checkpointable block each), mean pool, projection.
// Returns the embedding's layer.
int add_text_tower(Model& model, const ClipSizes& s) {
  int t = add_text_embedding(model, s);
  for (std::int64_t i = 0; i < s.text_layers; ++i) {
    const int block = static_cast<int>(i) + 1;
    const std::string p = "text.layer" + std::to_string(i) + ".";
    int y = add_linear(model, p + "qkv", s.hidden, 3 * s.hidden, {t, block});
    y = add_attention(model, p + "attention", s.hidden, s.heads, s.dropout, /*causal=*/false, s.seq, {y, block});
    y = add_linear(model, p + "attn_out", s.hidden, s.hidden, {y, block});
    y = add_dropout(model, p + "attn_dropout", s.dropout, {y, block});
    t = add_layernorm(model, p + "attn_ln", s.hidden, {add_residual(model, p + "attn_residual", t, y, block), block});
    y = add_linear(model, p + "ffn_in", s.hidden, 4 * s.hidden, {t, block});
    y = add_gelu(model, p + "gelu", {y, block});
    y = add_linear(model, p + "ffn_out", 4 * s.hidden, s.hidden, {y, block});
    y = add_dropout(model, p + "ffn_dropout", s.dropout, {y, block});
    t = add_layernorm(model, p + "ffn_ln", s.hidden, {add_residual(model, p + "ffn_residual", t, y, block), block});
  }
  Layer pool;
  pool.name = "text.pool";
  pool.kind = "pool";
  pool.inputs = {t};
  pool.forward = [](const std::vector<torch::Tensor>& in, const RunContext&) { return in[0].mean(1); };
  t = model.add_layer(std::move(pool));
  t = add_linear(model, "text.proj", s.hidden, s.dim, {t});
  return add_normalize(model, "text.norm", t);
}

// The loss, with CLIP's initial temperature 0.07 as a learnable log-scale.
void add_clip_loss(Model& model, int image_embedding, int text_embedding) {
  auto log_scale = model.register_module("loss", std::make_shared<torch::nn::Module>("LogScale"));
  torch::Tensor scale = log_scale->register_parameter("log_scale", torch::full({}, std::log(1 / 0.07)));
  auto settings = std::make_shared<ContrastiveLossSettings>();
  Layer loss;
  loss.name = "loss";
  loss.kind = "contrastive_loss";
  loss.inputs = {image_embedding, text_embedding};
  loss.parameters = {scale};
  loss.contrastive = settings;
  loss.forward = [scale, settings](const std::vector<torch::Tensor>& in, const RunContext&) {
    return run_contrastive_layer(in[0], in[1], scale, *settings);
  };
  model.add_layer(std::move(loss));
}

// The task: each pair shows one of `concepts`; its image is the concept's template plus noise,
// its caption the concept's token sequence with a tenth of the tokens replaced at random. The
// positives are told apart from the negatives only by learning both templates.
void set_clip_task(Model& model, const ClipSizes& s) {
  auto task = at::make_generator<at::CPUGeneratorImpl>(kTaskSeed);
  const torch::Tensor image_templates = torch::randn({s.concepts, s.channels, s.image, s.image}, task, torch::kFloat32);
  const torch::Tensor captions = torch::randint(s.vocab, {s.concepts, s.seq}, task, torch::kInt64);
  model.set_batch_generator([image_templates, captions, concepts = s.concepts, vocab = s.vocab](std::int64_t batch,
                                                                                                std::uint64_t batch_seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(batch_seed);
    const torch::Tensor concept_ids = torch::randint(concepts, {batch}, gen, torch::kInt64);
    const auto shape = image_templates.sizes();
    const torch::Tensor noise = torch::randn({batch, shape[1], shape[2], shape[3]}, gen, torch::kFloat32);
    Batch b;
    b.input = image_templates.index_select(0, concept_ids) + 0.5 * noise;
    const torch::Tensor text = captions.index_select(0, concept_ids);
    const torch::Tensor replace = torch::rand(text.sizes(), gen) < 0.1;
    b.target = torch::where(replace, torch::randint(vocab, text.sizes(), gen, torch::kInt64), text);
    return b;
  });
}

}  // namespace

Model build_clip(const Config& config, std::uint64_t seed) {
  const ClipSizes sizes = clip_sizes(config);
  torch::manual_seed(seed);
  Model model("clip", config);
  const int image_embedding = add_image_tower(model, sizes);
  const int text_embedding = add_text_tower(model, sizes);
  add_clip_loss(model, image_embedding, text_embedding);
  set_clip_task(model, sizes);
  return model;
}

}  // namespace headroom::models
