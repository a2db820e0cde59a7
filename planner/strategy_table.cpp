#include "planner/strategy_table.h"

#include <array>
#include <sstream>

#include "core/errors.h"

namespace headroom::planner {

std::span<const StrategyEntry> strategy_table() { return kStrategies; }

const StrategyEntry& strategy_entry(Strategy id) {
  for (const auto& entry : kStrategies) {
    if (entry.id == id) return entry;
  }
  throw std::logic_error("strategy missing from the strategy table");
}

std::string strategy_name(Strategy id) { return std::string(strategy_entry(id).name); }

std::string strategy_names(bool implemented_only) {
  std::string out;
  for (const auto& entry : kStrategies) {
    if (implemented_only && !entry.implemented) continue;
    out += (out.empty() ? "" : ", ") + std::string(entry.name);
  }
  return out;
}

std::set<Strategy> all_strategies() {
  std::set<Strategy> out;
  for (const auto& entry : kStrategies) {
    if (entry.implemented && entry.in_all) out.insert(entry.id);
  }
  return out;
}

std::set<Strategy> parse_strategies(const std::string& text) {
  if (text == "none") return {};
  if (text == "all") return all_strategies();
  std::set<Strategy> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const StrategyEntry* found = nullptr;
    for (const auto& entry : kStrategies) {
      if (entry.name == item) found = &entry;
    }
    if (found == nullptr) {
      throw core::InputError("strategies: unknown strategy '" + item + "' (known: " + strategy_names(false) +
                             ", all, none)");
    }
    if (!found->implemented) {
      throw core::InputError("strategies: '" + item + "' is not implemented yet (available: " + strategy_names() + ")");
    }
    out.insert(found->id);
  }
  if (out.empty()) throw core::InputError("strategies: name at least one strategy, or 'none'");
  return out;
}

bool applies_to(Strategy id, const core::Trace& trace) {
  const auto& entry = strategy_entry(id);
  return entry.trace_has_what_it_needs == nullptr || entry.trace_has_what_it_needs(trace);
}

}  // namespace headroom::planner
