#pragma once
// Whether this CPU computes a precision natively. oneDNN's bfloat16 kernels need avx512_bf16 (or
// AMX); without them every element is converted, and a bfloat16 matrix product of 512x512 ran 10x
// slower than float32's on an AVX2-only Zen 3 (62.5 against 6.3 ms), so a bf16 profile there took
// ten times a float32 one without a word. Said before the work, with what it costs here, timed.
#include <string>

#include "core/precision.h"
#include "runtime/host_info.h"  // cpu_has_native_bf16

namespace headroom::runtime {

// Empty where `precision` runs natively on this CPU (fp32 always does); otherwise one line naming
// what the CPU lacks and the price: a 512x512 matrix product timed here in bfloat16 and float32.
std::string cpu_precision_warning(core::Precision precision);

}  // namespace headroom::runtime
