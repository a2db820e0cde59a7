#pragma once
// The strategy table (core/strategies.h) as the planner, the CLI and the desktop app read it:
// --strategies parsed and listed, "all" for a number of workers, whether a trace measured what a
// strategy needs.
#include <set>
#include <span>
#include <string>

#include "core/strategies.h"
#include "core/trace.h"

namespace headroom::planner {

using core::has_contrastive_loss;
using core::has_tempo_pass;
using core::kStrategies;
using core::l2l_can_run;
using core::Strategy;
using core::StrategyEntry;

std::span<const StrategyEntry> strategy_table();
const StrategyEntry& strategy_entry(Strategy id);
std::string strategy_name(Strategy id);

// "mbp, checkpoint, tempo": the implemented strategies' names (or every one's).
std::string strategy_names(bool implemented_only = true);
// What "all" means for a step shared by `workers` data-parallel workers: every implemented
// strategy that runs with them.
std::set<Strategy> all_strategies(int workers = 1);

// Whether `text` (as --strategies takes it) names "all", alone or beside names it already holds.
bool asks_for_all(const std::string& text);

// Parses "mbp,checkpoint", "all" or "none" for `workers` data-parallel workers. "all" may be
// written beside names ("all,l2l"): it holds them already. "none" stands alone. Throws InputError
// naming an unknown strategy or one that is not implemented yet, with the names the table knows.
std::set<Strategy> parse_strategies(const std::string& text, int workers = 1);

// Whether the trace measured what the strategy needs (always true for those that need nothing).
bool applies_to(Strategy id, const core::Trace& trace);

}  // namespace headroom::planner
