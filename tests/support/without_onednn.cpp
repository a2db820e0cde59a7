// HEADROOM_TEST_WITHOUT_ONEDNN=1 runs the in-process libtorch tests as a CPU without AVX-512 runs
// them: PyTorch takes its oneDNN paths (bfloat16 matrix products among them) only where AVX-512 is,
// and falls back to its own kernels, which round differently, elsewhere. Together with
// ATEN_CPU_CAPABILITY=avx2 (PyTorch's own vectorised kernels) it checks, on a machine that has
// AVX-512, that a test's tolerance holds where it does not (docs/guide/developing.md, "Tests").
// examples/pytorch_step.py reads the same variable, so both sides of a cross-check agree.
#include <ATen/Context.h>

#include <cstdlib>

namespace {

const bool kOneDnnAsAsked = [] {
  const char* set = std::getenv("HEADROOM_TEST_WITHOUT_ONEDNN");
  if (set != nullptr && *set != '\0' && *set != '0') at::globalContext().setUserEnabledMkldnn(false);
  return true;
}();

}  // namespace
