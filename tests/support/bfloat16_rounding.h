#pragma once
// How far bfloat16 rounding may take a gradient, as the tests measure it (max|a - b| / max|b| over a
// tensor, worst tensor). With 8 significant bits every operand moves by up to 2^-8 of itself, and an
// entry that sums terms of both signs (a bias whose shares cancel) moves by 2^-8 of its terms' sizes,
// which may be many times the entry: how far depends on the kernels a CPU has (oneDNN's bfloat16
// products where AVX-512 is, PyTorch's own elsewhere; ATen's matrix product drifts 6x further
// without oneDNN), so no fixed figure below the largest entry holds on every machine. The tests
// therefore hold a plan's gradients to the same run's own rounding (the full batch's in the same
// precision against float32), and this bound only separates rounding from another function (wrong
// data, a term left out, a wrong scale), which moves the largest entries by their own size.
#include <algorithm>
#include <cstddef>

namespace headroom::testing {

inline constexpr double kBfloat16RoundingOnly = 0.5;

// A bfloat16 step of m micro-batches sums m shares, each rounded to bfloat16 where the full batch's
// gradient is rounded once: its distance from float32's gradients may be up to m times the full
// batch's own, and at least twice it at any m (the two round in different places).
inline double bfloat16_accumulation_bound(double full_batch_error, std::size_t micro_batches) {
  return static_cast<double>(std::max<std::size_t>(2, micro_batches)) * full_batch_error;
}

}  // namespace headroom::testing
