#pragma once
// The layer graph of a trace: who reads whose output, who keeps it for backward, and which blocks
// can be checkpointed as a unit.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/step_choice.h"
#include "core/trace.h"

namespace headroom::planner {

struct BlockSpan {
  int block = 0;
  int first = 0;  // first and last layer ids (blocks are contiguous)
  int last = 0;
  int input = core::kModelInput;  // the one layer outside the block that its layers read
  bool checkpointable = false;
  std::string why_not;  // when not checkpointable
  // The layer whose backward, in a standard step, lets go of the gradient that arrives at the
  // block's output: the last layer, unless that layer hands the gradient on as it is (a residual
  // add), where it lives on in its input's gradient until another reader's gradient is added to it.
  // A checkpointed block's backward keeps that gradient from there to its end.
  int output_gradient_released_by = 0;
};

// An input that a Tempo layer stops keeping for backward: with nobody else keeping it, it is freed
// in the forward of its last reader instead of after the Tempo layer's backward.
struct ReleasedInput {
  int producer = 0;  // the layer whose output it is
  int freed_by = 0;  // its last reader, a later layer than the Tempo layer
};

// An output that a Tempo layer keeps for its own backward while the standard layer does not: the
// layer that freed it in the standard step (the first-run saver's backward, or else the last
// reader's forward) no longer does; the Tempo layer's backward does.
struct HeldOutput {
  int released_by = -1;  // -1: nothing to move (nobody reads the output)
  bool in_backward = false;
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
  // The block the trace numbers `id`, or nullptr.
  const BlockSpan* block_with_id(int id) const;
  // Tempo: whether the layer's Tempo variant can be chosen on its own. It can when the trace
  // measured it and its costs do not depend on another layer's choice: no other layer with a Tempo
  // variant keeps the same input, and an input it releases is freed inside the same block.
  bool can_be_tempo(int layer) const { return tempo_[static_cast<std::size_t>(layer)].eligible; }
  // Inputs the Tempo variant stops keeping whose free then moves to a later layer's forward (the
  // Tempo layer's own measurement covers inputs it reads last).
  const std::vector<ReleasedInput>& released_inputs(int layer) const {
    return tempo_[static_cast<std::size_t>(layer)].released;
  }
  const HeldOutput& held_output(int layer) const { return tempo_[static_cast<std::size_t>(layer)].held; }
  std::vector<int> tempo_candidates() const;
  // Every layer that can run as a Tempo layer, as one (a choice of layer variants only).
  core::StepChoice all_tempo() const;
  // The layer whose backward, in a standard step, lets go of the gradient that arrives at `layer`'s
  // output, among layers [first, layer]: `layer` itself, unless it hands the gradient on as it is
  // (a residual add), where the gradient lives on in its input's until another reader's gradient is
  // added to it (in place, by the autograd engine). A backward seeded with that gradient from
  // outside (a checkpoint, L2L) holds it from there to its end.
  int output_gradient_released_by(int layer, int first) const;
  // Whether the layer's backward may let that gradient go partway and then hold more: a module of
  // many autograd nodes (a TorchScript module's layer), where a held gradient adds to the layer's
  // own measured peak; a zoo layer's backward is one node or holds the gradient to its end.
  bool composite(int layer) const { return composite_[static_cast<std::size_t>(layer)]; }
  // A TorchScript module holding BatchNorm: its recompute in a checkpointed block runs on copies of
  // the module's buffers (models/torchscript_model.cpp), which its backward keeps.
  bool recomputes_on_buffer_copies(int layer) const { return buffer_copies_[static_cast<std::size_t>(layer)]; }
  // Measured (the trace's checkpointed pass): the layer's standard backward reads its own output.
  bool keeps_own_output(int layer) const { return keeps_output_[static_cast<std::size_t>(layer)]; }
  // Where the layer's output goes when the layer itself does not keep it (run without grad in a
  // checkpoint): the backward of the earliest reader that saves it, else its last reader's forward.
  HeldOutput released_by_readers(int layer) const;
  // Layers before the first block / after the last block.
  int first_block_layer() const;
  int last_block_layer() const;
  // The bytes of the parameters that train: the layer's, and all layers' before it (where a sharded
  // worker's flat order of them puts the layer's first).
  std::int64_t trainable_bytes(int layer) const {
    return trained_before_[static_cast<std::size_t>(layer) + 1] - trained_before_[static_cast<std::size_t>(layer)];
  }
  std::int64_t trainable_bytes_before(int layer) const { return trained_before_[static_cast<std::size_t>(layer)]; }
  std::int64_t trainable_bytes() const { return trained_before_.back(); }
  // The layer whose trainable parameters hold byte `byte` of that flat order (below the total).
  int layer_holding_trainable_byte(std::int64_t byte) const {
    return static_cast<int>(std::upper_bound(trained_before_.begin(), trained_before_.end(), byte) - trained_before_.begin()) - 1;
  }
  // Whether the layer's backward reads its parameters (core::backward_reads_parameters).
  bool backward_reads_parameters(int layer) const { return backward_reads_[static_cast<std::size_t>(layer)]; }
  // Each layer's unit a stage-3 worker gathers its parameters with (core::parameter_units).
  std::vector<int> parameter_units(core::GatherUnit unit) const { return core::parameter_units(block_of_, unit); }

 private:
  std::vector<std::int64_t> trained_before_;  // size() + 1 prefix sums
  std::vector<bool> backward_reads_;
  std::vector<int> block_of_;
  std::vector<std::vector<int>> readers_;
  std::vector<std::vector<int>> inputs_;
  std::vector<bool> hands_gradient_on_;  // a residual add: its backward passes its output's gradient on as it is
  std::vector<bool> composite_;
  std::vector<bool> keeps_output_;
  std::vector<int> first_saver_;  // per layer: the earliest reader that saves its output, or -1
  std::vector<bool> buffer_copies_;
  std::vector<bool> saved_;
  std::vector<int> order_;
  std::vector<BlockSpan> blocks_;
  std::vector<std::pair<int, std::size_t>> block_index_;  // (id, index into blocks_), by id
  struct TempoLayer {
    bool eligible = false;
    std::vector<ReleasedInput> released;
    HeldOutput held;
  };
  std::vector<TempoLayer> tempo_;
};

}  // namespace headroom::planner
