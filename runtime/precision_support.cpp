#include "runtime/precision_support.h"

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <vector>

namespace headroom::runtime {

namespace {

// The CPU's flags line, as words.
std::vector<std::string> cpu_flags() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::vector<std::string> out;
    for (std::string word; words >> word;) out.push_back(word);
    return out;
  }
  return {};
}

// Whether DNNL_MAX_CPU_ISA keeps oneDNN below the bfloat16 instructions (AVX2, AVX512_CORE, ...).
bool isa_capped_below_bf16() {
  const char* cap = std::getenv("DNNL_MAX_CPU_ISA");
  if (cap == nullptr || *cap == '\0') return false;
  std::string isa(cap);
  std::transform(isa.begin(), isa.end(), isa.begin(), [](unsigned char c) { return std::toupper(c); });
  return isa.find("BF16") == std::string::npos && isa.find("AMX") == std::string::npos && isa != "ALL";
}

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

bool cpu_has_native_bf16() {
  if (isa_capped_below_bf16()) return false;
  const auto flags = cpu_flags();
  return std::any_of(flags.begin(), flags.end(), [](const std::string& f) { return f == "avx512_bf16" || f == "amx_bf16"; });
}

std::string cpu_precision_warning(core::Precision precision) {
  if (precision != core::Precision::Bf16 && precision != core::Precision::Bf16Autocast) return "";
  if (cpu_has_native_bf16()) return "";
  const double low = matmul_ms(torch::kBFloat16), full = matmul_ms(torch::kFloat32);
  char text[512];
  std::snprintf(text, sizeof text,
                "this CPU has no native bfloat16 arithmetic (no avx512_bf16 or amx_bf16%s): a 512x512 matrix "
                "product takes %.1f ms in bfloat16 against %.1f ms in float32 here (%.1fx), and %s's step and its "
                "profile take about that much longer than fp32's",
                isa_capped_below_bf16() ? " within DNNL_MAX_CPU_ISA" : "", low, full, full > 0 ? low / full : 0.0,
                std::string(core::precision_name(precision)).c_str());
  return text;
}

}  // namespace headroom::runtime
