#include "runtime/intra_op_threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

namespace headroom::runtime {

namespace {

// Looked up at run time: libtorch links whichever BLAS the system provides through libblas.so.3,
// so OpenBLAS's own entry points are not known at link time.
template <typename Function>
Function* openblas_function(const char* name) {
  return reinterpret_cast<Function*>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

void use_threads(int threads) {
  at::set_num_threads(threads);
  if (auto* set = openblas_function<void(int)>("openblas_set_num_threads")) set(threads);
}

int blas_threads() {
  auto* get = openblas_function<int()>("openblas_get_num_threads");
  return get != nullptr ? get() : 0;
}

}  // namespace headroom::runtime
