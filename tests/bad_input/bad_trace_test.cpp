// Every field of a trace spoiled in turn (missing, wrong type, out of range): the reader names it,
// or the field is one it takes on purpose.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/atomic_file.h"
#include "core/json_reader.h"
#include "core/trace.h"
#include "support/build_paths.h"
#include "support/spoiled_fields.h"

namespace headroom {
namespace {

using nlohmann::json;
using testing::Sweep;
using testing::sweep;

const std::string kTrace = std::string(HEADROOM_TRACES_DIR) + "/cpu-mlp.json";

TEST(BadTrace, EveryFieldSpoiledIsNamedOrDocumented) {
  const json good = core::parse_json(core::read_file(kTrace), kTrace);
  const Sweep s = sweep(good, [](const json& d) { core::trace_from_json(d, "t.json"); });
  EXPECT_GT(s.spoiled, 100);
  for (const auto& a : s.accepted) ADD_FAILURE() << "accepted: " << a;
  std::printf("trace: %d spoiled documents, %zu accepted\n", s.spoiled, s.accepted.size());
}

// A contrastive model's loss profile (clip), field by field.
TEST(BadTrace, EveryContrastiveLossFieldSpoiledIsNamedOrDocumented) {
  const std::string clip = std::string(HEADROOM_TRACES_DIR) + "/cpu-clip.json";
  const json good = core::parse_json(core::read_file(clip), clip);
  const Sweep s = sweep(good, [](const json& d) { core::trace_from_json(d, "t.json"); }, "/contrastive_loss");
  EXPECT_GT(s.spoiled, 40);
  for (const auto& a : s.accepted) ADD_FAILURE() << "accepted: " << a;
}

}  // namespace
}  // namespace headroom
