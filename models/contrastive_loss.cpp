#include "models/contrastive_loss.h"

#include "models/ring_contrastive_loss.h"

#include <limits>
#include <stdexcept>
#include <string>

#include <c10/core/impl/LocalDispatchKeySet.h>

namespace headroom::models {

namespace {

void check_embeddings(const torch::Tensor& q, const torch::Tensor& k) {
  if (q.dim() != 2 || k.dim() != 2 || q.sizes() != k.sizes() || q.size(0) == 0) {
    throw std::invalid_argument("contrastive loss: expected two [B, D] embeddings of one shape with B > 0");
  }
}

// Folds one tile x into the running max m and running sum l along `dim` (1: per row, 0: per
// column), so that afterwards m + log l is the log-sum-exp of everything folded in. m starts at
// -inf and l at 0: the first tile's rescale is exp(-inf) * 0 = 0. When `reuse` is set x is used as
// the exponential's buffer (the caller needs it no more); otherwise a second tile buffer is made.
void fold_tile(torch::Tensor& x, torch::Tensor m, torch::Tensor l, std::int64_t dim, bool reuse) {
  const torch::Tensor m_new = at::maximum(m, x.amax(dim));
  l.mul_((m - m_new).exp_());
  torch::Tensor e = reuse ? x.sub_(m_new.unsqueeze(dim)) : at::sub(x, m_new.unsqueeze(dim));
  l.add_(e.exp_().sum(dim));
  m.copy_(m_new);
}

// Inf-CL's tiled symmetric InfoNCE of scaled queries q~ (= s q) and keys k.
struct TiledContrastiveLoss : public torch::autograd::Function<TiledContrastiveLoss> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qs, const torch::Tensor& k,
                               std::int64_t rows, std::int64_t cols) {
    const std::int64_t batch = qs.size(0);
    const auto options = qs.options();
    const double inf = std::numeric_limits<double>::infinity();
    torch::Tensor lse_rows = at::empty({batch}, options);
    torch::Tensor m_cols = at::full({batch}, -inf, options), l_cols = at::zeros({batch}, options);
    torch::Tensor positives = at::zeros({}, options);
    for (std::int64_t r0 = 0; r0 < batch; r0 += rows) {
      const std::int64_t rb = std::min(rows, batch - r0);
      const torch::Tensor qb = qs.narrow(0, r0, rb);
      torch::Tensor m_rows = at::full({rb}, -inf, options), l_rows = at::zeros({rb}, options);
      for (std::int64_t c0 = 0; c0 < batch; c0 += cols) {
        const std::int64_t cb = std::min(cols, batch - c0);
        torch::Tensor x = at::mm(qb, k.narrow(0, c0, cb).t());
        fold_tile(x, m_rows, l_rows, 1, /*reuse=*/false);
        fold_tile(x, m_cols.narrow(0, c0, cb), l_cols.narrow(0, c0, cb), 0, /*reuse=*/true);
      }
      lse_rows.narrow(0, r0, rb).copy_(l_rows.log_().add_(m_rows));
      // The positives x_ii of this block, without a [B, D] product.
      positives.add_((qb * k.narrow(0, r0, rb)).sum());
    }
    torch::Tensor lse_cols = l_cols.log_().add_(m_cols);
    const double b = static_cast<double>(batch);
    torch::Tensor loss = (lse_rows.sum() + lse_cols.sum()).div_(2 * b).sub_(positives.div_(b));
    ctx->save_for_backward({qs, k, lse_rows, lse_cols});
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["cols"] = cols;
    return loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& qs = saved[0];
    const torch::Tensor& k = saved[1];
    const torch::Tensor& lse_rows = saved[2];
    const torch::Tensor& lse_cols = saved[3];
    const std::int64_t rows = ctx->saved_data["rows"].toInt();
    const std::int64_t cols = ctx->saved_data["cols"].toInt();
    const std::int64_t batch = qs.size(0);
    const double b = static_cast<double>(batch);
    const torch::Tensor g = grad_outputs[0];
    // dL/dlse is 1/(2B) for every row and every column lse.
    const torch::Tensor per_lse = g / (2 * b);
    torch::Tensor dqs = at::zeros_like(qs), dk = at::zeros_like(k);
    accumulate_tile_gradients(qs, k, lse_rows, lse_cols, per_lse, {rows, cols}, dqs, dk);
    // The positives: d(-mean_i x_ii)/dq~_i = -k_i / B, and -q~_i / B for k_i.
    const torch::Tensor per_positive = g / b;
    dqs.addcmul_(k, per_positive, -1);
    dk.addcmul_(qs, per_positive, -1);
    return {dqs, dk, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void accumulate_tile_gradients(const torch::Tensor& qs, const torch::Tensor& kb, const torch::Tensor& lse_rows,
                               const torch::Tensor& lse_cols, const torch::Tensor& per_lse, LossTiles tiles,
                               torch::Tensor& dqs, torch::Tensor& dkb) {
  const std::int64_t rows = qs.size(0), cols = kb.size(0);
  for (std::int64_t r0 = 0; r0 < rows; r0 += tiles.rows) {
    const std::int64_t rb = std::min(tiles.rows, rows - r0);
    const torch::Tensor qb = qs.narrow(0, r0, rb);
    torch::Tensor dqb = dqs.narrow(0, r0, rb);
    const torch::Tensor lse_r = lse_rows.narrow(0, r0, rb).unsqueeze(1);
    for (std::int64_t c0 = 0; c0 < cols; c0 += tiles.cols) {
      const std::int64_t cb = std::min(tiles.cols, cols - c0);
      const torch::Tensor kt = kb.narrow(0, c0, cb);
      torch::Tensor x = at::mm(qb, kt.t());
      // Each term at most per_lse: exp of a logit less its lse.
      torch::Tensor p = at::sub(x, lse_r).exp_();
      p.add_(x.sub_(lse_cols.narrow(0, c0, cb).unsqueeze(0)).exp_()).mul_(per_lse);
      dqb.addmm_(p, kt);
      dkb.narrow(0, c0, cb).addmm_(p.t(), qb);
    }
  }
}

torch::Tensor contrastive_loss_standard(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& log_scale) {
  check_embeddings(q, k);
  const torch::Tensor qs = q * log_scale.exp();
  const torch::Tensor x = at::mm(qs, k.t());
  const torch::Tensor positives = (qs * k).sum(1);
  return (x.logsumexp(1).mean() + x.logsumexp(0).mean()) / 2 - positives.mean();
}

torch::Tensor contrastive_loss_tiled(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& log_scale,
                                     LossTiles tiles) {
  check_embeddings(q, k);
  if (tiles.rows <= 0 || tiles.cols <= 0) {
    throw std::invalid_argument("contrastive loss: tile rows and columns must be positive, got " +
                                std::to_string(tiles.rows) + " x " + std::to_string(tiles.cols));
  }
  const torch::Tensor qs = q * log_scale.exp();
  return TiledContrastiveLoss::apply(qs, k, tiles.rows, tiles.cols);
}

torch::Tensor run_contrastive_layer(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& log_scale,
                                    ContrastiveLossSettings& settings) {
  using Mode = ContrastiveLossSettings::Mode;
  switch (settings.mode) {
    case Mode::Loss: {
      // Float32 in every precision, autocast or not: the logits' log-sum-exp over a batch of
      // thousands loses the positives in bfloat16's 8 bits, and Inf-CL's tiles fold into float32
      // running sums. The towers hand over float32 embeddings (the zoo's l2norm), so only a
      // bfloat16 log-scale is cast.
      const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
      const torch::Tensor qf = q.to(at::kFloat), kf = k.to(at::kFloat), scale = log_scale.to(at::kFloat);
      if (settings.ring != nullptr) {
        return contrastive_loss_ring(qf, kf, scale,
                                     settings.tiles.value_or(LossTiles{q.size(0), std::numeric_limits<std::int64_t>::max()}),
                                     *settings.ring);
      }
      return settings.tiles ? contrastive_loss_tiled(qf, kf, scale, *settings.tiles) : contrastive_loss_standard(qf, kf, scale);
    }
    case Mode::Capture: {
      const std::int64_t b = q.size(0);
      if (!settings.cached_q.defined()) {
        // Float32, as the loss reads them, whatever the towers ran in.
        settings.cached_q = at::empty({settings.cache_rows, q.size(1)}, q.options().dtype(at::kFloat));
        settings.cached_k = at::empty({settings.cache_rows, k.size(1)}, k.options().dtype(at::kFloat));
      }
      settings.cached_q.narrow(0, settings.offset, b).copy_(q);
      settings.cached_k.narrow(0, settings.offset, b).copy_(k);
      return at::zeros({}, q.options());
    }
    case Mode::Surrogate: {
      const std::int64_t b = q.size(0);
      return (q * settings.cached_q.narrow(0, settings.offset, b)).sum() +
             (k * settings.cached_k.narrow(0, settings.offset, b)).sum();
    }
  }
  throw std::logic_error("contrastive loss: unknown mode");
}

}  // namespace headroom::models
