#include "cli/flag_names.h"

#include <map>

namespace headroom::cli {

namespace {

// Field names are those of the option structs the CLI fills (profiler::ProfileOptions,
// executor::ExecuteOptions, planner::PlanRequest, a model's settings); the short forms are what
// the planner's messages are expected to say.
const std::map<std::string, std::string>& flags_by_field() {
  static const std::map<std::string, std::string> flags{
      {"batch", "--batch"},
      {"batch_sizes", "--batch-sizes"},
      {"budget", "--budget"},
      {"budget_bytes", "--budget"},
      {"bucket_cap_bytes", "--bucket-cap"},
      {"data", "--data"},
      {"device", "--device"},
      {"global_batch", "--batch"},
      {"link", "--link"},
      {"locate_steps", "--locate-steps"},
      {"margin", "--margin"},
      {"margin_fraction", "--margin"},
      {"optimizer", "--optimizer"},
      {"rank", "--rank"},
      {"repeats", "--repeats"},
      {"setting", "--set"},
      {"steps", "--steps"},
      {"strategies", "--strategies"},
      {"threads", "--threads"},
      {"timing_seconds", "--timing-seconds"},
      {"warmup_steps", "--warmup"},
      {"workers", "--devices"},
      {"world_size", "--world-size"},
  };
  return flags;
}

}  // namespace

std::string name_flag(const std::string& message) {
  // Only "field:" or "field value:" at the start: a sentence that merely begins with a field's
  // word ("batch size must be positive") is not about the flag.
  const auto colon = message.find(':');
  if (colon == std::string::npos) return message;
  const std::string head = message.substr(0, colon);
  const auto space = head.find(' ');
  if (space != std::string::npos && head.find(' ', space + 1) != std::string::npos) return message;
  const std::string field = head.substr(0, space);
  const auto flag = flags_by_field().find(field);
  return flag == flags_by_field().end() ? message : flag->second + message.substr(field.size());
}

}  // namespace headroom::cli
