#pragma once
// A copy between host buffers as L2L makes it on a CPU, shared with the probe that times
// that copy for the trace, so that what is timed is what runs.
#include <torch/types.h>

namespace headroom::runtime {

// One memcpy on the calling thread into a new contiguous tensor (a non-contiguous tensor is cloned).
// Not a clone: a clone runs ATen's parallel_for, which on L2L's copy thread opened an OpenMP
// team of its own beside the compute's and OpenBLAS's threads on the same cores, and each copy then
// waited for time slices (milliseconds a stage) rather than for its bytes.
torch::Tensor host_memcpy(const torch::Tensor& from);

}  // namespace headroom::runtime
