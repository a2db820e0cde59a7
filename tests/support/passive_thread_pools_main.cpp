// The main of the test binaries that run torch work (or start processes that do): restarted once
// with both thread pools passive, as the headroom command runs (runtime/host_info.h). OpenBLAS reads
// its setting as it loads, before any test's code, so a test cannot set it for itself.
#include <gtest/gtest.h>

#include "runtime/host_info.h"

int main(int argc, char** argv) {
  headroom::runtime::run_with_passive_thread_pools(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
