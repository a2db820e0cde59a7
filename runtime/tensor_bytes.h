#pragma once
// Bytes of a tensor's elements, 0 for an undefined one (a gradient not made yet, an optimizer
// state slot it does not use).
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace headroom::runtime {

inline std::int64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? static_cast<std::int64_t>(t.numel() * t.element_size()) : 0;
}

}  // namespace headroom::runtime
