#pragma once
// Chrome trace JSON (the "traceEvents" format that Perfetto and chrome://tracing open).
// Timestamps come in as int64 nanoseconds and are converted to the format's microseconds here only.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/trace.h"

namespace headroom::core {

class ChromeTrace {
 public:
  void name_process(int pid, const std::string& name);
  void name_thread(int pid, int tid, const std::string& name);
  // A span on a lane ("X" event).
  void add_span(int pid, int tid, const std::string& name, const std::string& category, std::int64_t start_ns,
                std::int64_t duration_ns, nlohmann::json args = nlohmann::json::object());
  // A counter track sample ("C" event), e.g. memory in bytes over time.
  void add_counter(int pid, const std::string& name, std::int64_t time_ns, nlohmann::json values);

  nlohmann::json to_json() const;

 private:
  nlohmann::json events_ = nlohmann::json::array();
};

// One profiled step at `batch` laid out as a timeline: forward spans layer by layer, backward spans
// in reverse, the optimizer step, and a memory counter (static bytes plus the kept bytes that build
// up in forward and are released in backward). Throws InputError if the trace has no such batch.
ChromeTrace profile_step_chrome(const Trace& trace, std::int64_t batch);
nlohmann::json profile_step_timeline(const Trace& trace, std::int64_t batch);

}  // namespace headroom::core
