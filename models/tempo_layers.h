#pragma once
// Tempo's memory-lean layers (Andoorveedu et al.; docs/design.md, "Tempo"): the same functions as GELU,
// LayerNorm and attention's dropout·V, with backward passes that need less saved state. Each is a
// custom autograd function; all run on the CPU and on CUDA (plain tensor ops).
#include <torch/torch.h>

namespace headroom::models {

// GELU (exact, erf form) that keeps its output and a 1-byte mask "input >= GELU's minimum" instead
// of its input. The output is usually kept anyway by the next layer (a Linear saves its input), so
// the layer's own saved state drops from 4 bytes per element to 1.
torch::Tensor tempo_gelu(const torch::Tensor& input);

// GELU's derivative recovered from its output and the branch mask, by linear interpolation in
// tables of the exact derivative over each branch of the inverse (built once, in double precision,
// in variables that make both branches smooth: sqrt(y - y_min), and the Gaussian tail's asymptote
// for inputs below -2.5). On the CPU a fused loop; elsewhere the same lookup in tensor ops.
// Exposed so the recovery error can be measured against the true derivative.
torch::Tensor gelu_derivative_from_output(const torch::Tensor& output, const torch::Tensor& mask);
// The tensor-op lookup (what CUDA runs), callable on any device so it can be tested here.
torch::Tensor gelu_derivative_from_output_by_tensor_ops(const torch::Tensor& output, const torch::Tensor& mask);
// Where GELU is smallest: x* = -0.7518 (the mask splits the inverse's two branches there).
inline constexpr double kGeluArgMin = -0.75179152469356445;

// LayerNorm over the last dimension that keeps its output and the per-row rstd instead of its
// input; backward recovers the normalized input as (y - beta) / gamma. When some |gamma| is below
// `min_abs_gamma` that division would amplify rounding, so the call falls back to the standard
// layer norm (which keeps its input) — decided per call, from the parameters' current values.
torch::Tensor tempo_layer_norm(const torch::Tensor& input, const torch::Tensor& gamma, const torch::Tensor& beta,
                              double eps, double min_abs_gamma = 1e-3);

// Attention's (probs ⊙ keep · scale) · V, keeping the probabilities (which the softmax before it
// keeps anyway) and the 1-byte keep mask rather than the dropped-out probabilities; the product
// is recomputed in backward. `keep` is a bool tensor shaped like `probs` (undefined: no dropout).
torch::Tensor tempo_dropout_matmul(const torch::Tensor& probs, const torch::Tensor& keep, double scale,
                                  const torch::Tensor& value);

}  // namespace headroom::models
