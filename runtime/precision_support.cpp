#include "runtime/precision_support.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

namespace headroom::runtime {

namespace {

// Median milliseconds of a 512x512 matrix product in `dtype`, after one untimed.
double timed_matmul_ms(torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::randn({512, 512}).to(dtype), b = torch::randn({512, 512}).to(dtype);
  torch::mm(a, b);
  std::vector<double> times;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    torch::mm(a, b);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// libtorch 1.13 picks oneDNN's bfloat16 product from the CPU's flags, and oneDNN refuses it where
// DNNL_MAX_CPU_ISA caps it below them (the AVX2 emulation): timed then as a CPU without the
// instructions runs it, with oneDNN off.
double matmul_ms(torch::ScalarType dtype) {
  try {
    return timed_matmul_ms(dtype);
  } catch (const std::exception&) {  // dnnl::error, which is no c10::Error
    const bool enabled = at::globalContext().userEnabledMkldnn();
    at::globalContext().setUserEnabledMkldnn(false);
    const double ms = timed_matmul_ms(dtype);
    at::globalContext().setUserEnabledMkldnn(enabled);
    return ms;
  }
}

}  // namespace

std::string cpu_precision_warning(core::Precision precision) {
  if (!core::computes_in_bfloat16(precision)) return "";
  if (cpu_has_native_bf16()) return "";
  const double low = matmul_ms(torch::kBFloat16), full = matmul_ms(torch::kFloat32);
  char text[512];
  std::snprintf(text, sizeof text,
                "this CPU has no native bfloat16 arithmetic (no avx512_bf16 or amx_bf16%s): a 512x512 matrix "
                "product takes %.1f ms in bfloat16 against %.1f ms in float32 here (%.1fx), and %s's step and its "
                "profile take about that much longer than fp32's",
                std::getenv("DNNL_MAX_CPU_ISA") != nullptr && *std::getenv("DNNL_MAX_CPU_ISA") != '\0' ? " within DNNL_MAX_CPU_ISA" : "", low, full, full > 0 ? low / full : 0.0,
                std::string(core::precision_name(precision)).c_str());
  return text;
}

}  // namespace headroom::runtime
