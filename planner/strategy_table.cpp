#include "planner/strategy_table.h"

#include <algorithm>
#include <array>
#include <sstream>
#include <vector>

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

std::set<Strategy> all_strategies(int workers) {
  std::set<Strategy> out;
  for (const auto& entry : kStrategies) {
    if (entry.implemented && (workers <= 1 || entry.data_parallel)) out.insert(entry.id);
  }
  return out;
}

namespace {

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

}  // namespace

bool asks_for_all(const std::string& text) {
  const auto names = split_names(text);
  return std::find(names.begin(), names.end(), "all") != names.end();
}

std::set<Strategy> parse_strategies(const std::string& text, int workers) {
  const auto names = split_names(text);
  const bool none = std::find(names.begin(), names.end(), "none") != names.end();
  if (none && names.size() > 1) {
    throw core::InputError("strategies: 'none' stands alone (the whole batch, nothing applied), got '" + text + "'");
  }
  if (none) return {};
  std::set<Strategy> out;
  for (const auto& item : names) {
    if (item == "all") continue;  // checked below, once every name is known
    const StrategyEntry* found = nullptr;
    for (const auto& entry : kStrategies) {
      if (entry.name == item) found = &entry;
    }
    if (found == nullptr) {
      throw core::InputError("strategies: unknown strategy '" + item + "' (known: " + strategy_names(false) +
                             ", all; or none, alone)");
    }
    if (!found->implemented) {
      throw core::InputError("strategies: '" + item + "' is not implemented yet (available: " + strategy_names() + ")");
    }
    out.insert(found->id);
  }
  // Beside names, "all" holds them already: "all,l2l" is all.
  if (asks_for_all(text)) return all_strategies(workers);
  if (out.empty()) throw core::InputError("strategies: name at least one strategy, or 'none'");
  return out;
}

bool applies_to(Strategy id, const core::Trace& trace) {
  const auto& entry = strategy_entry(id);
  return entry.trace_has_what_it_needs == nullptr || entry.trace_has_what_it_needs(trace);
}

}  // namespace headroom::planner
