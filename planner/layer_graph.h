#pragma once
// The layer graph of a trace: who reads whose output, who keeps it for backward, and which blocks
// can be checkpointed as a unit.
#include <string>
#include <vector>

#include "core/trace.h"

namespace headroom::planner {

struct BlockSpan {
  int block = 0;
  int first = 0;  // first and last layer ids (blocks are contiguous)
  int last = 0;
  int input = core::kModelInput;  // the one layer outside the block that its layers read
  bool checkpointable = false;
  std::string why_not;  // when not checkpointable
};

class LayerGraph {
 public:
  // Throws InputError if the layers do not form a DAG in execution order.
  explicit LayerGraph(const core::Trace& trace);

  std::size_t size() const { return readers_.size(); }
  const std::vector<int>& topological_order() const { return order_; }
  const std::vector<int>& readers(int layer) const { return readers_[static_cast<std::size_t>(layer)]; }
  // The last layer that reads `layer`'s output, or -1 if none does.
  int last_reader(int layer) const;
  // Whether some reader keeps `layer`'s output for its backward.
  bool output_saved(int layer) const { return saved_[static_cast<std::size_t>(layer)]; }
  const std::vector<BlockSpan>& blocks() const { return blocks_; }
  // Layers before the first block / after the last block.
  int first_block_layer() const;
  int last_block_layer() const;

 private:
  std::vector<std::vector<int>> readers_;
  std::vector<bool> saved_;
  std::vector<int> order_;
  std::vector<BlockSpan> blocks_;
};

}  // namespace headroom::planner
