#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "runtime/intra_op_threads.h"

namespace headroom {
namespace {

// Both pools a step runs on follow the thread count, so `--threads 1` runs the matrix products on one
// thread too (they run on OpenBLAS's own pthreads, which at::set_num_threads does not reach).
TEST(IntraOpThreads, ReachBothPools) {
  const int before = at::get_num_threads();
  for (const int threads : {1, 2, 1}) {
    runtime::use_threads(threads);
    EXPECT_EQ(at::get_num_threads(), threads);
    const int blas = runtime::blas_threads();
    if (blas != 0) {
      EXPECT_EQ(blas, threads);
    }
  }
  runtime::use_threads(before);
}

}  // namespace
}  // namespace headroom
