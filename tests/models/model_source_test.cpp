#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/errors.h"
#include "models/model_source.h"
#include "support/small_zoo.h"

namespace headroom {
namespace {

using testing::kSmall;

// What the profiler records of a model is enough to build the same model again, as the executor does.
TEST(ModelSource, RebuildsTheSameModelFromWhatATraceRecords) {
  const models::Model built = models::build_model({"bert", kSmall.at("bert"), std::nullopt}, 2);
  const models::ModelSource source = models::model_source(built);
  EXPECT_EQ(source.name, "bert");
  EXPECT_EQ(source.config.at("hidden"), "32");
  EXPECT_EQ(source.config.count("layers"), 1U);  // every key, the preset's included, not only the overrides
  const models::Model rebuilt = models::build_model(source, 2);
  ASSERT_EQ(rebuilt.layers().size(), built.layers().size());
  for (std::size_t i = 0; i < built.layers().size(); ++i) EXPECT_EQ(rebuilt.layers()[i].name, built.layers()[i].name);
  const auto a = built.parameters(), b = rebuilt.parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));
  EXPECT_THROW(models::build_model({"resnet9000", {}, std::nullopt}, 0), core::InputError);
}

}  // namespace
}  // namespace headroom
