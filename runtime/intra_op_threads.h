#pragma once
// The threads a step's kernels run on, set once for both pools that run them.

namespace headroom::runtime {

// Sets libtorch's intra-op threads (libgomp: PyTorch's own kernels, oneDNN's convolutions) and
// OpenBLAS's (the matrix products) to `threads`. at::set_num_threads does not reach OpenBLAS built
// with its own pthreads (Debian's libopenblas0-pthread): at --threads 1 the matrix products would
// still run on every core, and beside another process's busy core wait on a preempted OpenBLAS
// worker (docs/results.md, "Thread pools"). A BLAS without OpenBLAS's entry point follows libgomp's.
void use_threads(int threads);

// The threads OpenBLAS's products run on, or 0 where the BLAS is not OpenBLAS.
int blas_threads();

}  // namespace headroom::runtime
