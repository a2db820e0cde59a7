#pragma once
// Every technique the planner knows, one entry each: the CLI's --strategies help and errors, the
// desktop app's checkboxes and the "not implemented yet" refusals all read this table, so a new
// technique is one more entry here plus its own files (README: "How a plan is made").
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "core/trace.h"

namespace headroom::planner {

enum class Strategy { MicroBatching, Checkpointing, Tempo, InfCl, L2L };

struct StrategyEntry {
  Strategy id;
  std::string_view name;     // as written in --strategies and in a plan's "strategies"
  std::string_view label;    // as the desktop app shows it
  std::string_view summary;  // what it does to the step, and what it costs
  bool implemented = false;  // the search can use it
  // What a trace must have measured for the strategy to apply ("the trace has no <needs>"; empty:
  // nothing more), and the test for it; "all" skips a strategy whose needs the trace lacks.
  std::string_view needs;
  bool (*trace_has_what_it_needs)(const core::Trace&) = nullptr;
};

std::span<const StrategyEntry> strategy_table();
const StrategyEntry& strategy_entry(Strategy id);
std::string strategy_name(Strategy id);

// "mbp, checkpoint, tempo": the implemented strategies' names (or every one's).
std::string strategy_names(bool implemented_only = true);
// Every implemented strategy: what "all" means.
std::set<Strategy> all_strategies();

// Parses "mbp,checkpoint", "all" or "none"; throws InputError naming an unknown strategy or one
// that is not implemented yet, with the names the table knows.
std::set<Strategy> parse_strategies(const std::string& text);

// Whether the trace measured what the strategy needs (always true for those that need nothing).
bool applies_to(Strategy id, const core::Trace& trace);

}  // namespace headroom::planner
