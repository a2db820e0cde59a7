#pragma once
// The numeric precision a training step runs in: a property of the step, not a technique. The
// profiler measures under it, the trace and the plan record it, and the executor runs under it;
// a plan for one precision is refused for a trace of another.
#include <array>
#include <string>
#include <string_view>

namespace headroom::core {

enum class Precision {
  Fp32,          // everything in float32 (the default; traces from before precision was recorded)
  Bf16Autocast,  // forward and loss under autocast to bfloat16 (CPU and CUDA), backward outside it
  Fp16Autocast,  // the same in float16, with loss scaling (CUDA)
  Bf16,          // parameters and gradients in bfloat16, the optimizer keeping float32 master weights
};

struct PrecisionEntry {
  Precision id;
  std::string_view name;     // as --precision and the trace and plan files write it
  std::string_view summary;  // what runs in which dtype
};

inline constexpr auto kPrecisions = std::to_array<PrecisionEntry>({
    {Precision::Fp32, "fp32", "every tensor in float32"},
    {Precision::Bf16Autocast, "bf16-autocast",
     "forward and loss under autocast to bfloat16 (matrix products and convolutions in bfloat16, parameters, "
     "gradients and optimizer state in float32), backward outside the autocast region"},
    {Precision::Fp16Autocast, "fp16-autocast", "forward and loss under autocast to float16 with dynamic loss scaling (CUDA)"},
    {Precision::Bf16, "bf16", "parameters and gradients in bfloat16, the optimizer keeping float32 master weights and state"},
});

std::string_view precision_name(Precision precision);
std::string precision_names();  // "fp32, bf16-autocast, fp16-autocast, bf16"
// Throws InputError "<field>: '<text>' is not a precision (known: ...)".
Precision parse_precision(std::string_view text, std::string_view field = "precision");
inline bool is_autocast(Precision precision) {
  return precision == Precision::Bf16Autocast || precision == Precision::Fp16Autocast;
}
// Whether Tempo's memory-lean layers run, and are profiled, in the precision on the device: fp32, and
// on the CPU bf16-autocast (their ops run as autocast runs them there: the zoo's LayerNorms on
// float32 sums, GELU and attention's dropout·V on bfloat16) and bf16 (every op on bfloat16, as the
// standard layers run). Not bf16-autocast on CUDA, whose autocast runs softmax in float32 where the
// Tempo attention's backward would mix dtypes; not fp16-autocast, nor bf16 on CUDA (not measured).
inline bool tempo_layers_run_in(Precision precision, bool cuda) {
  return precision == Precision::Fp32 || (!cuda && (precision == Precision::Bf16Autocast || precision == Precision::Bf16));
}
// Where they do, for the refusals: "fp32 and, on the CPU, bf16-autocast and bf16".
inline constexpr std::string_view kTempoLayerPrecisions = "fp32 and, on the CPU, bf16-autocast and bf16";
// Bytes of one parameter element as the step keeps it: bfloat16 under bf16; float32 otherwise
// (autocast casts copies of the weights, the parameters themselves stay float32).
// Whether the step's matrix products run in bfloat16 (bf16, bf16-autocast).
inline bool computes_in_bfloat16(Precision precision) {
  return precision == Precision::Bf16 || precision == Precision::Bf16Autocast;
}

inline int parameter_element_bytes(Precision precision) { return precision == Precision::Bf16 ? 2 : 4; }

}  // namespace headroom::core
