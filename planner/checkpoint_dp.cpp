#include "planner/checkpoint_dp.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace headroom::planner {

std::int64_t chain_peak(const Chain& chain, const std::vector<bool>& checkpoint) {
  std::int64_t prefix = chain.base;
  std::int64_t peak = chain.base;
  for (std::size_t k = 0; k < chain.stages.size(); ++k) {
    const ChainStage& s = chain.stages[k];
    const bool ck = checkpoint[k];
    peak = std::max(peak, prefix + (ck ? s.checkpointed_peak : s.stored_peak));
    prefix += ck ? s.checkpointed_bytes : s.stored_bytes;
  }
  return std::max(peak, prefix + chain.tail_peak);
}

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

}  // namespace

ChainSolution solve_checkpoint_dp(const Chain& chain, std::int64_t limit, std::int64_t unit) {
  if (unit <= 0) throw std::invalid_argument("solve_checkpoint_dp: unit must be positive");
  const std::size_t n = chain.stages.size();
  // Every prefix is at most the sum of the larger kept sizes; a state beyond the limit is dead.
  std::int64_t max_units = 0;
  for (const auto& s : chain.stages) max_units += ceil_div(std::max(s.stored_bytes, s.checkpointed_bytes), unit);
  const std::int64_t limit_units = std::max<std::int64_t>(0, (limit - chain.base) / unit);
  const std::int64_t width = std::min(max_units, limit_units) + 1;
  if (chain.base > limit) return {};

  constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
  // best[s] after stage k: least recompute time for stages < k whose kept sizes (rounded up) add to
  // s units. Only two rows are kept; the choices of every row are, as bits (the table of times for a
  // chain of a thousand stages is tens of MB, and the search solves it many times).
  const auto w = static_cast<std::size_t>(width);
  std::vector<std::int64_t> current(w, kNone), next_row(w, kNone);
  std::vector<bool> took_checkpoint(n * w, false);
  current[0] = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const ChainStage& stage = chain.stages[k];
    std::fill(next_row.begin(), next_row.end(), kNone);
    for (std::int64_t s = 0; s < width; ++s) {
      const std::int64_t t = current[static_cast<std::size_t>(s)];
      if (t == kNone) continue;
      // The true prefix is at most s units: checking with s * unit keeps the answer safe.
      const std::int64_t prefix = chain.base + s * unit;
      for (const bool ck : {false, true}) {
        if (ck && !stage.checkpointable) continue;
        if (prefix + (ck ? stage.checkpointed_peak : stage.stored_peak) > limit) continue;
        const std::int64_t next = s + ceil_div(ck ? stage.checkpointed_bytes : stage.stored_bytes, unit);
        if (next >= width) continue;
        const std::int64_t time = t + (ck ? stage.recompute_ns : 0);
        auto& slot = next_row[static_cast<std::size_t>(next)];
        if (time < slot) {
          slot = time;
          took_checkpoint[k * w + static_cast<std::size_t>(next)] = ck;
        }
      }
    }
    current.swap(next_row);
  }
  const std::vector<std::int64_t>& last = current;

  ChainSolution solution;
  std::int64_t end = -1;
  for (std::int64_t s = 0; s < width; ++s) {
    const std::int64_t t = last[static_cast<std::size_t>(s)];
    if (t == kNone || chain.base + s * unit + chain.tail_peak > limit) continue;
    // Lower time first; among equal times the smaller kept total (a lower peak at the tail).
    if (end < 0 || t < last[static_cast<std::size_t>(end)]) end = s;
  }
  if (end < 0) return solution;
  solution.feasible = true;
  solution.checkpoint.assign(n, false);
  solution.recompute_ns = last[static_cast<std::size_t>(end)];
  for (std::size_t k = n; k-- > 0;) {
    const bool ck = took_checkpoint[k * w + static_cast<std::size_t>(end)];
    solution.checkpoint[k] = ck;
    const ChainStage& stage = chain.stages[k];
    end -= ceil_div(ck ? stage.checkpointed_bytes : stage.stored_bytes, unit);
  }
  solution.peak_bytes = chain_peak(chain, solution.checkpoint);
  return solution;
}

std::optional<std::int64_t> least_recompute_bound(const Chain& chain, std::int64_t limit) {
  if (chain.base > limit) return std::nullopt;
  struct State {
    std::int64_t kept;  // by the stages so far, above the base
    std::int64_t time;  // their recompute
  };
  // Sorted by kept, each faster than every one keeping less: the others can never do better.
  std::vector<State> states{{0, 0}}, next;
  constexpr std::size_t kMostStates = 512;
  const std::int64_t room = limit - chain.base;
  for (const ChainStage& stage : chain.stages) {
    next.clear();
    for (const State& s : states) {
      for (const bool ck : {false, true}) {
        if (ck && !stage.checkpointable) continue;
        if (s.kept + (ck ? stage.checkpointed_peak : stage.stored_peak) > room) continue;
        next.push_back({s.kept + (ck ? stage.checkpointed_bytes : stage.stored_bytes), s.time + (ck ? stage.recompute_ns : 0)});
      }
    }
    if (next.empty()) return std::nullopt;
    std::sort(next.begin(), next.end(), [](const State& a, const State& b) { return a.kept < b.kept || (a.kept == b.kept && a.time < b.time); });
    states.clear();
    for (const State& s : next) {
      if (states.empty() || s.time < states.back().time) states.push_back(s);
    }
    if (states.size() > kMostStates) {
      // Merge runs of neighbours into their least size and least time: every choice still fits
      // where it did, in no more time.
      const std::size_t per = (states.size() + kMostStates - 1) / kMostStates;
      std::size_t out = 0;
      for (std::size_t i = 0; i < states.size(); i += per) {
        const std::size_t last = std::min(states.size(), i + per) - 1;
        states[out++] = {states[i].kept, states[last].time};
      }
      states.resize(out);
    }
  }
  std::optional<std::int64_t> least;
  for (const State& s : states) {
    if (s.kept + chain.tail_peak <= room) least = std::min(least.value_or(s.time), s.time);
  }
  return least;
}

std::int64_t least_chain_peak_bound(const Chain& chain) {
  std::int64_t prefix = chain.base, peak = chain.base;
  for (const ChainStage& s : chain.stages) {
    peak = std::max(peak, prefix + (s.checkpointable ? std::min(s.stored_peak, s.checkpointed_peak) : s.stored_peak));
    prefix += s.checkpointable ? std::min(s.stored_bytes, s.checkpointed_bytes) : s.stored_bytes;
  }
  return std::max(peak, prefix + chain.tail_peak);
}

ChainSolution solve_checkpoint_exhaustive(const Chain& chain, std::int64_t limit) {
  const std::size_t n = chain.stages.size();
  if (n > 20) throw std::invalid_argument("solve_checkpoint_exhaustive: too many stages");
  ChainSolution best;
  std::vector<bool> choice(n);
  for (std::uint32_t mask = 0; mask < (1u << n); ++mask) {
    std::int64_t time = 0;
    bool allowed = true;
    for (std::size_t k = 0; k < n; ++k) {
      choice[k] = ((mask >> k) & 1u) != 0;
      if (choice[k] && !chain.stages[k].checkpointable) allowed = false;
      if (choice[k]) time += chain.stages[k].recompute_ns;
    }
    if (!allowed) continue;
    const std::int64_t peak = chain_peak(chain, choice);
    if (peak > limit) continue;
    if (!best.feasible || time < best.recompute_ns || (time == best.recompute_ns && peak < best.peak_bytes)) {
      best = {true, choice, time, peak};
    }
  }
  return best;
}

}  // namespace headroom::planner
