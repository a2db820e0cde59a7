#include "runtime/host_copy.h"

#include <cstring>

#include <torch/torch.h>

namespace headroom::runtime {

torch::Tensor host_memcpy(const torch::Tensor& from) {
  if (!from.is_contiguous()) return from.clone();
  torch::Tensor to = torch::empty_like(from, at::MemoryFormat::Contiguous);
  std::memcpy(to.data_ptr(), from.data_ptr(), from.nbytes());
  return to;
}

}  // namespace headroom::runtime
