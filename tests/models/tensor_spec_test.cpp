// The shape, dtype and range of a TorchScript model's input or target as a flag gives them
// (models/torchscript_model.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/torchscript_model.h"
#include "support/input_error.h"

namespace headroom {
namespace {

using testing::error_of;

TEST(TensorSpec, ParsesShapesDtypesAndRanges) {
  const auto image = models::parse_tensor_spec("3x224x224:float32", "input");
  EXPECT_EQ(image.shape, (std::vector<std::int64_t>{3, 224, 224}));
  EXPECT_EQ(image.dtype, "float32");
  EXPECT_EQ(image.text(), "3x224x224:float32");
  const auto tokens = models::parse_tensor_spec("128:int64:0-50257", "input");
  EXPECT_EQ(tokens.low, 0);
  EXPECT_EQ(tokens.high, 50257);
  EXPECT_EQ(tokens.text(), "128:int64:0-50257");
  const auto label = models::parse_tensor_spec("scalar:int64:0-10", "target");
  EXPECT_TRUE(label.shape.empty());
  EXPECT_EQ(label.text(), "scalar:int64:0-10");
  EXPECT_TRUE(models::parse_tensor_spec(":int64:0-10", "target").shape.empty());
  EXPECT_EQ(label.elements(), 1);
}

TEST(TensorSpec, RefusesWhatCannotBeMadeNamingTheFlag) {
  for (const std::string bad : {"", "3x224", "3x0:float32", "3xx4:float32", "-3:float32", "3:float16", "3:int64",
                                "3:int64:5-5", "3:int64:a-b", "3:float32:0-1", "1048577:float32",
                                "1024x1024x1024:float32", "1x1x1x1x1x1x1x1x1:float32", "3:int32:0-4294967296"}) {
    const std::string message = error_of([&] { models::parse_tensor_spec(bad, "input"); });
    EXPECT_EQ(message.rfind("input: ", 0), 0u) << bad << ": " << message;
  }
  EXPECT_NE(error_of([] { models::parse_tensor_spec("3:float16", "input"); }).find("float32, float64, int64, int32"),
            std::string::npos);
}

}  // namespace
}  // namespace headroom
