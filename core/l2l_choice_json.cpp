#include "core/l2l_choice_json.h"

#include <string>

#include "core/plan.h"

namespace headroom::core {

void write_l2l_choice(nlohmann::json& document, const std::optional<L2LChoice>& choice) {
  if (!choice) return;
  document["l2l"] = {{"boundaries", choice->boundaries_on_host ? "host" : "device"}};
  if (!choice->whole_model()) document["l2l"]["from_block"] = choice->from_block;
}

std::optional<L2LChoice> read_l2l_choice(const JsonNode& root) {
  if (!root.has("l2l")) return std::nullopt;
  const auto l2l = root.at("l2l");
  const auto boundaries = l2l.at("boundaries");
  const std::string where = boundaries.as_string();
  if (where != "device" && where != "host") boundaries.fail("expected device or host, got '" + where + "'");
  L2LChoice choice{where == "host"};
  // Whether the trace has that block is checked against the trace (planner::check_choice).
  if (l2l.has("from_block")) choice.from_block = static_cast<int>(l2l.at("from_block").as_int_in(0, kMaxPlanBatch));
  return choice;
}

}  // namespace headroom::core
