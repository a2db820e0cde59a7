#include "core/l2l_stages.h"

#include <algorithm>
#include <stdexcept>

namespace headroom::core {

L2LStages l2l_stages(const std::vector<int>& blocks, const std::vector<std::vector<int>>& inputs) {
  if (blocks.size() != inputs.size()) throw std::logic_error("l2l_stages: one block id and one input list per layer");
  L2LStages out;
  out.stage_of.resize(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (out.stages.empty() || blocks[i] != blocks[static_cast<std::size_t>(out.stages.back().first)]) {
      out.stages.push_back({static_cast<int>(i), static_cast<int>(i), {}, {}});
    }
    out.stages.back().last = static_cast<int>(i);
    out.stage_of[i] = static_cast<int>(out.stages.size()) - 1;
  }
  const auto add = [](std::vector<int>& to, int j) {
    if (std::find(to.begin(), to.end(), j) == to.end()) to.push_back(j);
  };
  out.first_reader.assign(blocks.size(), -1);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const int reader = out.stage_of[i];
    for (const int j : inputs[i]) {
      if (j < 0) continue;
      if (static_cast<std::size_t>(j) >= i) throw std::logic_error("l2l_stages: a layer reads a later one");
      const int producer = out.stage_of[static_cast<std::size_t>(j)];
      if (producer == reader) continue;
      add(out.stages[static_cast<std::size_t>(reader)].inputs, j);
      add(out.stages[static_cast<std::size_t>(producer)].exports, j);
      int& first = out.first_reader[static_cast<std::size_t>(j)];
      if (first < 0 || reader < first) first = reader;
    }
  }
  return out;
}

}  // namespace headroom::core
