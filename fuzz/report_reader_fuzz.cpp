// libFuzzer target: the report reader (core::parse_json + core::report_from_json). A rejected
// input must be an InputError; an accepted report must read back from the document headroom writes.
#include <optional>

#include "core/json_reader.h"
#include "core/report.h"
#include "fuzz/fuzz_support.h"

using namespace headroom;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::optional<core::Report> report;
  if (!fuzz::accepts(
          [&] { report = core::report_from_json(core::parse_json(fuzz::as_text(data, size), "fuzz"), "fuzz"); })) {
    return 0;
  }
  fuzz::must_succeed("reading back the written report", [&] {
    const std::string written = core::to_json(*report).dump(1);
    (void)core::report_from_json(core::parse_json(written, "written"), "written");
  });
  return 0;
}
