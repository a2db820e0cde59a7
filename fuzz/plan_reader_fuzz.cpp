// libFuzzer target: the plan reader (core::parse_json + core::plan_from_json). A rejected input must
// be an InputError; an accepted plan must read back equal from the document headroom writes for it.
#include <optional>

#include "core/json_reader.h"
#include "core/plan.h"
#include "fuzz/fuzz_support.h"

using namespace headroom;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::optional<core::Plan> plan;
  if (!fuzz::accepts([&] { plan = core::plan_from_json(core::parse_json(fuzz::as_text(data, size), "fuzz"), "fuzz"); })) {
    return 0;
  }
  fuzz::must_succeed("reading back the written plan", [&] {
    const std::string written = core::to_json(*plan).dump(1);
    if (core::plan_from_json(core::parse_json(written, "written"), "written") != *plan) {
      fuzz::finding("the written plan reads back different");
    }
  });
  return 0;
}
