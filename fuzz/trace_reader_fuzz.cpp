// libFuzzer target: the trace reader (core::parse_json + core::trace_from_json). A rejected input
// must be an InputError; an accepted one must come back from the document headroom writes for it.
#include <optional>

#include "core/json_reader.h"
#include "core/trace.h"
#include "fuzz/fuzz_support.h"

using namespace headroom;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::optional<core::Trace> trace;
  if (!fuzz::accepts([&] { trace = core::trace_from_json(core::parse_json(fuzz::as_text(data, size), "fuzz"), "fuzz"); })) {
    return 0;
  }
  fuzz::must_succeed("reading back the written trace", [&] {
    const std::string written = core::to_json(*trace).dump(1);
    const core::Trace again = core::trace_from_json(core::parse_json(written, "written"), "written");
    if (again.layers != trace->layers || again.steps != trace->steps || again.batch_sizes != trace->batch_sizes) {
      fuzz::finding("the written trace reads back with other layers, steps or batch sizes");
    }
  });
  return 0;
}
