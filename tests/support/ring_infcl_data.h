#pragma once
// The embeddings of the ring Inf-CL test, made the same way by each worker process and by the test
// that checks them against the single-process loss.
#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace headroom::ring_test {

inline torch::Tensor unit_rows(std::int64_t batch, std::int64_t dim, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::nn::functional::normalize(torch::randn({batch, dim}, gen),
                                          torch::nn::functional::NormalizeFuncOptions().dim(1));
}

// "unit": independent unit rows. "grouped": rows in 16 tight groups, so that at a scale of 100 the
// scaled logits within a group pass fp32's exp limit (~88.7) while the loss stays of order log 8.
inline torch::Tensor embeddings(const std::string& kind, std::int64_t batch, std::int64_t dim, std::uint64_t seed) {
  if (kind == "unit") return unit_rows(batch, dim, seed);
  const std::int64_t repeats = (batch + 15) / 16;
  const torch::Tensor groups = unit_rows(16, dim, 3).repeat({repeats, 1}).narrow(0, 0, batch);
  return torch::nn::functional::normalize(groups + 0.05 * unit_rows(batch, dim, seed),
                                          torch::nn::functional::NormalizeFuncOptions().dim(1));
}

// Rank r's rows of a batch split over n workers: the remainder one each to the lowest ranks, as
// data parallel splits a global batch.
inline std::int64_t share(std::int64_t batch, int workers, int rank) {
  return batch / workers + (rank < batch % workers ? 1 : 0);
}
inline std::int64_t first_row(std::int64_t batch, int workers, int rank) {
  std::int64_t first = 0;
  for (int r = 0; r < rank; ++r) first += share(batch, workers, r);
  return first;
}

}  // namespace headroom::ring_test
