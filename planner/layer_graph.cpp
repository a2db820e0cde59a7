#include "planner/layer_graph.h"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>

#include <algorithm>
#include <iterator>

#include "core/errors.h"
#include "core/known_names.h"
#include "core/sharding.h"

namespace headroom::planner {

namespace {

// The layers in an order where each comes after the layers it reads.
std::vector<int> topological_order_of(const core::Trace& trace) {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  Graph graph(trace.layers.size());
  for (const auto& layer : trace.layers) {
    for (const int input : layer.inputs) {
      if (input >= 0) boost::add_edge(static_cast<std::size_t>(input), static_cast<std::size_t>(layer.id), graph);
    }
  }
  std::vector<std::size_t> reversed;
  try {
    boost::topological_sort(graph, std::back_inserter(reversed));
  } catch (const boost::not_a_dag&) {
    throw core::InputError("the trace's layers form a cycle");
  }
  std::vector<int> order;
  for (auto it = reversed.rbegin(); it != reversed.rend(); ++it) order.push_back(static_cast<int>(*it));
  return order;
}

// Blocks: contiguous runs of layers with the same block index.
std::vector<BlockSpan> contiguous_blocks(const core::Trace& trace) {
  std::vector<BlockSpan> blocks;
  for (const auto& layer : trace.layers) {
    if (layer.block < 0) continue;
    if (blocks.empty() || blocks.back().block != layer.block) {
      for (const auto& earlier : blocks) {
        if (earlier.block == layer.block) {
          throw core::InputError("block " + std::to_string(layer.block) + " is not contiguous (layer " + layer.name +
                                 " comes after another block)");
        }
      }
      BlockSpan span;
      span.block = layer.block;
      span.first = span.last = layer.id;
      blocks.push_back(span);
    } else if (blocks.back().last == layer.id - 1) {
      blocks.back().last = layer.id;
    } else {
      throw core::InputError("block " + std::to_string(layer.block) + " is not contiguous");
    }
  }
  return blocks;
}

// Checkpointable: the block reads one tensor from outside, and only its last layer is read from
// outside. Then recomputing it needs just that input.
void mark_checkpointable(BlockSpan& span, const core::Trace& trace, const LayerGraph& graph) {
  std::vector<int> external;
  span.checkpointable = true;
  for (int i = span.first; i <= span.last; ++i) {
    for (const int input : trace.layers[static_cast<std::size_t>(i)].inputs) {
      // The batch's further inputs (an attention mask) are held for the whole micro-batch and read
      // again when the block recomputes: they do not carry its work in.
      if (core::is_further_input(input)) continue;
      if (input < span.first && std::find(external.begin(), external.end(), input) == external.end()) {
        external.push_back(input);
      }
    }
    if (i == span.last) continue;
    for (const int reader : graph.readers(i)) {
      if (reader > span.last) {
        span.checkpointable = false;
        span.why_not = "layer " + trace.layers[static_cast<std::size_t>(reader)].name + " reads from inside the block";
      }
    }
  }
  if (external.size() == 1 && external.front() != core::kTargetInput) {
    span.input = external.front();
  } else if (external.size() == 1 && span.checkpointable) {
    span.checkpointable = false;
    span.why_not = "the block reads the target";
  } else if (span.checkpointable) {
    span.checkpointable = false;
    span.why_not = "the block reads " + std::to_string(external.size()) + " tensors from outside";
  }
}

// What a layer's Tempo variant changes (LayerGraph::can_be_tempo, released_inputs, held_output).
struct TempoVariant {
  bool eligible = false;
  std::vector<ReleasedInput> released;
  HeldOutput held;
};

// The inputs `layer`'s Tempo variant stops keeping that nobody else keeps, freed by their last
// reader instead; `tempo.eligible` goes false where that depends on another layer's choice.
void release_inputs(const core::LayerProfile& layer, const core::Trace& trace, const LayerGraph& graph, TempoVariant& tempo) {
  for (std::size_t k = 0; k < layer.inputs.size(); ++k) {
    const int input = layer.inputs[k];
    if (input < 0 || !layer.saves_inputs[k] || layer.tempo->saves_inputs[k]) continue;
    bool kept_by_other = false;
    for (const int reader : graph.readers(input)) {
      if (reader == layer.id) continue;
      const auto& other = trace.layers[static_cast<std::size_t>(reader)];
      for (std::size_t m = 0; m < other.inputs.size(); ++m) {
        if (other.inputs[m] != input || !other.saves_inputs[m]) continue;
        kept_by_other = true;
        // Two Tempo layers keeping one tensor: the free happens only when both run as Tempo layers, which the
        // all-Tempo pass cannot tell apart.
        if (other.tempo) tempo.eligible = false;
      }
    }
    const int freed_by = graph.last_reader(input);
    if (kept_by_other || freed_by == layer.id) continue;
    if (trace.layers[static_cast<std::size_t>(freed_by)].block != layer.block) tempo.eligible = false;
    tempo.released.push_back({input, freed_by});
  }
}

// `layer` has a Tempo variant (layer.tempo).
TempoVariant tempo_variant_of(const core::LayerProfile& layer, const core::Trace& trace, const LayerGraph& graph) {
  TempoVariant tempo;
  tempo.eligible = true;
  release_inputs(layer, trace, graph, tempo);
  if (layer.tempo->keeps_output && !graph.readers(layer.id).empty()) {
    // Backward runs in reverse, so of the readers that save the output the earliest one's
    // backward is the last to let go of it.
    int first_saver = -1;
    for (const int reader : graph.readers(layer.id)) {
      const auto& other = trace.layers[static_cast<std::size_t>(reader)];
      for (std::size_t m = 0; m < other.inputs.size(); ++m) {
        if (other.inputs[m] != layer.id || !other.saves_inputs[m]) continue;
        if (first_saver < 0 || reader < first_saver) first_saver = reader;
        if (other.tempo && !other.tempo->saves_inputs[m]) tempo.eligible = false;  // who frees it depends on both
      }
    }
    tempo.held = first_saver >= 0 ? HeldOutput{first_saver, true} : HeldOutput{graph.last_reader(layer.id), false};
  }
  return tempo;
}

}  // namespace

LayerGraph::LayerGraph(const core::Trace& trace)
    : readers_(trace.layers.size()), inputs_(trace.layers.size()), hands_gradient_on_(trace.layers.size(), false),
      composite_(trace.layers.size(), false), keeps_output_(trace.layers.size(), false), first_saver_(trace.layers.size(), -1),
      buffer_copies_(trace.layers.size(), false), saved_(trace.layers.size(), false) {
  trained_before_.reserve(trace.layers.size() + 1);
  trained_before_.push_back(0);
  for (const auto& layer : trace.layers) {
    trained_before_.push_back(trained_before_.back() + layer.trainable_param_bytes());
    backward_reads_.push_back(core::backward_reads_parameters(layer.kind));
    block_of_.push_back(layer.block);
  }
  for (const auto& layer : trace.layers) {
    inputs_[static_cast<std::size_t>(layer.id)] = layer.inputs;
    // Only a residual add is known to pass its gradient on; any other layer is taken to make new
    // ones, which counts a held gradient from the earliest point (never less than is held).
    hands_gradient_on_[static_cast<std::size_t>(layer.id)] = layer.kind == "add";
    composite_[static_cast<std::size_t>(layer.id)] = !core::is_known(core::kZooLayerKinds, layer.kind);
    buffer_copies_[static_cast<std::size_t>(layer.id)] =
        composite_[static_cast<std::size_t>(layer.id)] && layer.kind.find("batchnorm") != std::string::npos;
    for (std::size_t k = 0; k < layer.inputs.size(); ++k) {
      const int input = layer.inputs[k];
      if (input < 0) continue;
      readers_[static_cast<std::size_t>(input)].push_back(layer.id);
      if (layer.saves_inputs[k]) {
        saved_[static_cast<std::size_t>(input)] = true;
        auto& first = first_saver_[static_cast<std::size_t>(input)];
        if (first < 0 || layer.id < first) first = layer.id;
      }
    }
    keeps_output_[static_cast<std::size_t>(layer.id)] = layer.keeps_output;
  }
  order_ = topological_order_of(trace);

  blocks_ = contiguous_blocks(trace);
  for (std::size_t k = 0; k < blocks_.size(); ++k) block_index_.emplace_back(blocks_[k].block, k);
  std::sort(block_index_.begin(), block_index_.end());
  for (auto& span : blocks_) mark_checkpointable(span, trace, *this);
  for (auto& span : blocks_) span.output_gradient_released_by = output_gradient_released_by(span.last, span.first);

  tempo_.resize(trace.layers.size());
  for (const auto& layer : trace.layers) {
    if (!layer.tempo) continue;
    TempoVariant tempo = tempo_variant_of(layer, trace, *this);
    tempo_[static_cast<std::size_t>(layer.id)] = {tempo.eligible, std::move(tempo.released), tempo.held};
  }
}

std::vector<int> LayerGraph::tempo_candidates() const {
  std::vector<int> out;
  for (std::size_t i = 0; i < tempo_.size(); ++i) {
    if (tempo_[i].eligible) out.push_back(static_cast<int>(i));
  }
  return out;
}

core::StepChoice LayerGraph::all_tempo() const {
  core::StepChoice out;
  for (std::size_t i = 0; i < tempo_.size(); ++i) {
    if (tempo_[i].eligible) out.set_variant(static_cast<int>(i), core::LayerVariant::Tempo);
  }
  return out;
}

HeldOutput LayerGraph::released_by_readers(int layer) const {
  const int first = first_saver_[static_cast<std::size_t>(layer)];
  if (first >= 0) return {first, true};
  return {last_reader(layer), false};
}

int LayerGraph::output_gradient_released_by(int layer, int first) const {
  if (!hands_gradient_on_[static_cast<std::size_t>(layer)]) return layer;
  int released = layer;
  bool any = false;
  for (const int input : inputs_[static_cast<std::size_t>(layer)]) {
    if (input < first) return layer;  // it leaves the range: counted from the add on
    // An input another layer reads gets the latest such reader's gradient added to the arriving one
    // as that reader's backward ends; an input only the add reads passes it to its producer.
    int other_reader = -1;
    for (const int reader : readers_[static_cast<std::size_t>(input)]) {
      if (reader != layer) other_reader = std::max(other_reader, reader);
    }
    const int at = other_reader >= 0 ? other_reader : input;
    // The gradient's storage lives until its last holder lets go: the lowest layer, in backward order the last.
    released = any ? std::min(released, at) : at;
    any = true;
  }
  return std::clamp(released, first, layer);
}

int LayerGraph::last_reader(int layer) const {
  const auto& r = readers_[static_cast<std::size_t>(layer)];
  return r.empty() ? -1 : *std::max_element(r.begin(), r.end());
}

const BlockSpan* LayerGraph::block_with_id(int id) const {
  const auto it = std::lower_bound(block_index_.begin(), block_index_.end(), std::make_pair(id, std::size_t{0}));
  return it != block_index_.end() && it->first == id ? &blocks_[it->second] : nullptr;
}

int LayerGraph::first_block_layer() const { return blocks_.empty() ? static_cast<int>(size()) : blocks_.front().first; }
int LayerGraph::last_block_layer() const { return blocks_.empty() ? -1 : blocks_.back().last; }

}  // namespace headroom::planner
