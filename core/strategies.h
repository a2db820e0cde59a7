#pragma once
// Every technique a plan may name in its "strategies", one entry each: its name as --strategies and
// a plan file write it (the plan reader refuses any other), its label and summary as the desktop
// app and `headroom plan --help` show them, and what a trace must have measured for it. The CLI's
// --strategies help and errors, the GUI's checkboxes and the plan reader all read this table
// (planner/strategy_table.h parses and lists it), so a new technique is one more entry here plus
// its own files (docs/design.md, "Where a strategy lives").
#include <array>
#include <cstddef>
#include <string_view>

#include "core/l2l_refusal.h"
#include "core/trace.h"

namespace headroom::core {

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
  bool (*trace_has_what_it_needs)(const Trace&) = nullptr;
  // Runs with several data-parallel workers. One that does not is refused by name there (plan_step
  // says so) and left out of "all" there, as a strategy whose needs the trace lacks is.
  bool data_parallel = true;
};

inline bool has_tempo_pass(const Trace& trace) { return trace.has_tempo(); }
inline bool has_contrastive_loss(const Trace& trace) { return trace.contrastive_loss.has_value(); }

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
    {Strategy::Tempo, "tempo", "Tempo layers",
     "runs GELU, LayerNorm and attention's dropout as memory-lean variants that keep less for backward; costs "
     "what the trace measured for each",
     true, "Tempo-layer measurements (the model has no Tempo variants, or it was profiled with --no-tempo)", has_tempo_pass},
    {Strategy::InfCl, "infcl", "Inf-CL (tiled contrastive loss)",
     "computes a contrastive loss tile by tile without the B x B similarity matrix, keeping two tiles and O(B) "
     "vectors; costs one more matrix product per tile in backward (tiles chosen from those the trace measured)",
     true, "contrastive loss measurements (the model has no contrastive loss)", has_contrastive_loss},
    {Strategy::L2L, "l2l", "L2L (layer-to-layer offload)",
     "keeps parameters, gradients and optimizer state on the host and runs the step block by block, every "
     "micro-batch through a block before the next, with two blocks' parameters on the device; costs one more forward "
     "of every block and the copies (timed at the trace's copy bandwidth); chosen only where no plan without it "
     "fits, on one device",
     true, "model L2L can run (a zoo model without BatchNorm or a contrastive loss)", l2l_can_run, false},
});

// The names, in the table's order: what a plan's "strategies" may hold.
inline constexpr auto kStrategyNames = [] {
  std::array<std::string_view, kStrategies.size()> names{};
  for (std::size_t i = 0; i < kStrategies.size(); ++i) names[i] = kStrategies[i].name;
  return names;
}();

}  // namespace headroom::core
