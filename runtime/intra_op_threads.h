#pragma once
// The threads a step's kernels run on, set once for both pools that run them.

namespace headroom::runtime {

// Sets libtorch's intra-op threads (libgomp: PyTorch's own kernels, oneDNN's convolutions) and
// OpenBLAS's (the matrix products) to `threads`. at::set_num_threads does not reach OpenBLAS built
// with its own pthreads (Debian's libopenblas0-pthread): at --threads 1 the calibration's matrix
// product still ran at 178-182 GFLOP/s, as at 2, and with another process on the second core a
// zoo mlp profiled at "1 thread" took 30 ms a step against 10 ms executed quiet, its products
// waiting on a preempted OpenBLAS worker. A BLAS without OpenBLAS's entry point follows libgomp's.
void use_threads(int threads);

// The threads OpenBLAS's products run on, or 0 where the BLAS is not OpenBLAS.
int blas_threads();

}  // namespace headroom::runtime
