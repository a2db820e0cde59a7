#pragma once
// Every technique the planner knows, one entry each: the CLI's --strategies help and errors, the
// desktop app's checkboxes and the "not implemented yet" refusals all read this table, so a new
// technique is one more entry here plus its own files (README: "How a plan is made").
#include <array>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "core/known_names.h"
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
  // Runs with several data-parallel workers. One that does not is refused by name there (plan_step
  // says so) and left out of "all" there, as a strategy whose needs the trace lacks is.
  bool data_parallel = true;
};

inline bool has_lean_pass(const core::Trace& trace) { return trace.has_tempo(); }
inline bool has_contrastive_loss(const core::Trace& trace) { return trace.contrastive_loss.has_value(); }
// Whether L2L's relay can run the traced model (planner/l2l_model.h: l2l_refusal).
bool relay_can_run(const core::Trace& trace);

// The table. A new technique adds its id to the enum above and its entry here.
inline constexpr auto kStrategies = std::to_array<StrategyEntry>({
    {Strategy::MicroBatching, "mbp", "micro-batching",
     "splits the global batch into micro-batches run one after another, their mean losses weighted b_i/B so the "
     "accumulated gradient is the full batch's; costs the device's efficiency at small batches",
     true, "", nullptr},
    {Strategy::Checkpointing, "checkpoint", "checkpointing",
     "keeps only a block's input and runs its forward again in backward; costs one more forward of each "
     "checkpointed block",
     true, "", nullptr},
    {Strategy::Tempo, "tempo", "Tempo (lean layers)",
     "runs GELU, LayerNorm and attention's dropout as memory-lean variants that keep less for backward; costs "
     "what the trace measured for each",
     true, "lean-layer measurements (the model has no lean variants, or it was profiled with --no-tempo)", has_lean_pass},
    {Strategy::InfCl, "infcl", "Inf-CL (tiled contrastive loss)",
     "computes a contrastive loss tile by tile without the B x B similarity matrix, keeping two tiles and O(B) "
     "vectors; costs one more matrix product per tile in backward (tiles chosen from those the trace measured)",
     true, "contrastive loss measurements (the model has no contrastive loss)", has_contrastive_loss},
    {Strategy::L2L, "l2l", "L2L (layer-to-layer offload)",
     "keeps parameters, gradients and optimizer state on the host and runs the step block by block, every "
     "micro-batch through a block before the next, with two blocks' parameters on the device; costs one more forward "
     "of every block and the copies (timed at the trace's copy bandwidth); chosen only where no plan without it "
     "fits, on one device",
     true, "model the relay can run (a zoo model without BatchNorm or a contrastive loss)", relay_can_run, false},
});

// A plan file names strategies as the table does; core reads them against its own list.
constexpr bool names_agree_with_core() {
  if (kStrategies.size() != core::kStrategyNames.size()) return false;
  for (std::size_t i = 0; i < kStrategies.size(); ++i) {
    if (kStrategies[i].name != core::kStrategyNames[i]) return false;
  }
  return true;
}
static_assert(names_agree_with_core(), "planner/strategy_table.h and core/known_names.h must list the same strategies");

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
