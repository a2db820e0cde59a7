#pragma once
// A TorchScript module's forward cut into layers, as the module is written: its own helper methods
// (`_forward_impl`) and the containers above the chosen depth are inlined, each call of a submodule
// at that depth becomes a layer, and the functional code between calls (flatten, pooling, a
// residual's `+`, a `cat`, reshapes) runs with the next call, in forward's order. Each layer is a
// graph of its own that reads the module and earlier layers' outputs, so what the profiler times,
// the planner plans and the executor runs is the module's forward, piece by piece.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

namespace headroom::models {

// How deep layers go. `paths` (dotted module paths such as "layer2.1" or "features.3") names the
// layers; otherwise `depth` does (1: the module's children; a submodule without children above the
// depth is a layer too); depth 0 picks the shallowest depth with at least kDefaultLayers layers that
// hold parameters (or the deepest that can be cut, where a deeper one cannot).
struct LayerSelection {
  int depth = 0;
  std::vector<std::string> paths;
  // Where forward returns a tuple (logits and more): the element the loss reads, or -1.
  int output_index = -1;
};

inline constexpr int kDefaultLayers = 8;
inline constexpr int kMaxDepth = 16;

// One layer: a call of a submodule with the functional code that feeds it, or functional code alone
// (glue) where its result is read by a later layer than the next call, or after the last call.
struct ScriptSegment {
  std::string name;         // the module path it calls ("layer1.0"), or "glue:<op>"
  std::string module_path;  // empty for glue
  std::string class_name;   // the called module's class, or "glue"
  // Earlier segments whose outputs it reads, or the batch's inputs (core::model_input_id of forward's
  // input), in the order of its graph's inputs after the module itself.
  std::vector<int> inputs;
  // (the module, inputs...) -> the one tensor later layers read.
  std::shared_ptr<torch::jit::Graph> graph;
  // The segments between two points where one tensor carries everything forward form a block,
  // checkpointable as a unit.
  int block = 0;
  std::vector<std::string> called_modules;  // every submodule path its graph calls
  // fold_dtypes replaced a read of a float32 activation's dtype with its graph's last input: the
  // caller passes the dtype floating activations have in the step (float32, or bfloat16 where the
  // parameters are), as `mask.to(x.dtype)` would have read it.
  bool reads_activation_dtype = false;
};

struct ScriptGraph {
  std::vector<ScriptSegment> segments;
  // The module paths called as layers, each once, in order.
  std::vector<std::string> layer_paths;
  // The depth it was cut at (0 for --layers): recorded with the model, it rebuilds the same cut.
  int depth = 0;
};

// Throws InputError with one line naming the construct and where it is in the source: a layer called
// inside data-dependent control flow, a value other than a tensor passed between layers, a layer
// named twice or not called, an output that is not one tensor.
ScriptGraph cut_into_layers(const torch::jit::Module& module, const LayerSelection& selection);

// Blocks again, knowing which earlier layers' outputs each layer writes into in place (written[i]:
// producers, as a run showed through the tensors' version
// counters, which a view shares with its base): the writer and the producer end up in one block,
// as a checkpoint's second run would read the changed tensor.
void assign_blocks(ScriptGraph& graph, const std::vector<std::vector<int>>& written);

// After a run of the layers: a layer that reads an earlier layer's output only for its dtype
// (`mask.to(x.dtype)` in every block) gets the dtype that run showed (output_dtypes, per layer) as a
// constant, so it neither holds that output nor ties the layers between into one block; a float32
// one instead becomes the graph's last input (ScriptSegment::reads_activation_dtype), since under
// bf16 the same read gives bfloat16. Drops the inputs left unread; call assign_blocks after it.
void fold_dtypes(ScriptGraph& graph, const std::vector<c10::ScalarType>& output_dtypes);

// The submodule at a dotted path ("" is the module itself); nullopt where there is none.
std::optional<torch::jit::Module> submodule_at(const torch::jit::Module& module, const std::string& path);

}  // namespace headroom::models
