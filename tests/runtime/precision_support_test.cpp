#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "runtime/precision_support.h"

namespace headroom {
namespace {

// DNNL_MAX_CPU_ISA set for the test's span, as the AVX2 emulation sets it (docs/guide/developing.md).
class IsaCap {
 public:
  explicit IsaCap(const char* isa) {
    if (const char* before = std::getenv("DNNL_MAX_CPU_ISA")) before_ = before;
    ::setenv("DNNL_MAX_CPU_ISA", isa, 1);
  }
  ~IsaCap() {
    if (before_) {
      ::setenv("DNNL_MAX_CPU_ISA", before_->c_str(), 1);
    } else {
      ::unsetenv("DNNL_MAX_CPU_ISA");
    }
  }

 private:
  std::optional<std::string> before_;
};

TEST(PrecisionSupport, ACpuWithoutBfloat16IsSaidWithWhatItCostsHere) {
  EXPECT_EQ(runtime::cpu_precision_warning(core::Precision::Fp32), "");
  const IsaCap avx2("AVX2");
  EXPECT_FALSE(runtime::cpu_has_native_bf16());
  const std::string warning = runtime::cpu_precision_warning(core::Precision::Bf16Autocast);
  EXPECT_EQ(warning.rfind("this CPU has no native bfloat16 arithmetic (no avx512_bf16 or amx_bf16 within DNNL_MAX_CPU_ISA)", 0), 0u)
      << warning;
  EXPECT_NE(warning.find("ms in bfloat16 against"), std::string::npos) << warning;
  EXPECT_NE(warning.find("bf16-autocast's step"), std::string::npos) << warning;
}

TEST(PrecisionSupport, AnIsaCapThatKeepsBfloat16LeavesTheCpusFlagsToDecide) {
  const IsaCap bf16("AVX512_CORE_BF16");
  const IsaCap all("ALL");
  // Whatever this machine has: no warning exactly where the flags say bfloat16 is native.
  EXPECT_EQ(runtime::cpu_precision_warning(core::Precision::Bf16).empty(), runtime::cpu_has_native_bf16());
}

}  // namespace
}  // namespace headroom
