// CUPTI's errors as headroom names them (profiler/cupti/cuda_backend.h).
#include <gtest/gtest.h>

#include <string>

#include "profiler/cupti/cuda_backend.h"
#include "profiler/cupti/cupti_records.h"  // CUPTI's result codes

namespace headroom::profiler::cupti {
namespace {

TEST(CuptiErrors, NameTheCallAndTheResult) {
  const std::string message = cupti_error("cuptiActivityEnable", CUPTI_ERROR_INVALID_PARAMETER);
  EXPECT_EQ(message, "CUPTI cuptiActivityEnable failed: CUPTI_ERROR_INVALID_PARAMETER (1)");
}

}  // namespace
}  // namespace headroom::profiler::cupti
