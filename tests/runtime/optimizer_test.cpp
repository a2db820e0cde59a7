#include <gtest/gtest.h>

#include <utility>

#include "core/errors.h"
#include "runtime/optimizer.h"
#include "runtime/tensor_bytes.h"

namespace headroom {
namespace {

// The state the planner estimates per parameter (planner/optimizer_estimate) is what these build.
TEST(Optimizer, StateIsOneOrTwoFloatsPerParameterAfterAStep) {
  for (const auto& [name, floats] : {std::pair{"sgd", 1}, std::pair{"adam", 2}}) {
    SCOPED_TRACE(name);
    const torch::Tensor w = torch::ones({8, 4}, torch::requires_grad());
    auto optimizer = runtime::make_optimizer(name, {w});
    EXPECT_EQ(runtime::optimizer_state_bytes(*optimizer), 0);
    w.sum().backward();
    optimizer->step();
    EXPECT_EQ(runtime::optimizer_state_bytes(*optimizer), floats * runtime::tensor_bytes(w));
  }
  EXPECT_THROW(runtime::make_optimizer("lamb", {}), core::InputError);
}

}  // namespace
}  // namespace headroom
