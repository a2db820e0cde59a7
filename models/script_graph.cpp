#include "models/script_graph.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/passes/constant_propagation.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "core/errors.h"
#include "core/trace.h"

namespace headroom::models {

namespace jit = torch::jit;

namespace {

std::string join(const std::string& parent, const std::string& name) { return parent.empty() ? name : parent + "." + name; }

int depth_of(const std::string& path) {
  return path.empty() ? 0 : 1 + static_cast<int>(std::count(path.begin(), path.end(), '.'));
}

bool is_module_type(const c10::TypePtr& type) {
  const auto cls = type->cast<c10::ClassType>();
  return cls && cls->is_module();
}

// Where a node is in the module's source, for error lines: "file.py:123", or its kind alone.
std::string where(const jit::Node* node) {
  if (const auto location = node->sourceRange().file_line_col()) {
    return std::get<0>(*location) + ":" + std::to_string(std::get<1>(*location));
  }
  return "node " + std::string(node->kind().toQualString());
}

bool contains_tensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  if (is_module_type(type)) return false;
  for (const auto& contained : type->containedTypes()) {
    if (contains_tensor(contained)) return true;
  }
  return false;
}

std::int64_t parameter_count(const jit::Module& module) {
  std::int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

bool has_children(const jit::Module& module) { return module.children().size() > 0; }

// The dotted path of the submodule a value holds, reached from `self` through attributes; nullopt
// for anything else.
std::optional<std::string> module_path(const jit::Value* value, const jit::Value* self) {
  if (value == self) return std::string();
  if (!is_module_type(value->type())) return std::nullopt;
  const jit::Node* node = value->node();
  if (node->kind() != c10::prim::GetAttr) return std::nullopt;
  const auto parent = module_path(node->input(0), self);
  if (!parent) return std::nullopt;
  return join(*parent, node->s(c10::attr::name));
}

// The top-level node a (possibly nested) node belongs to.
const jit::Node* top_level(const jit::Node* node, const jit::Block* top) {
  while (node->owningBlock() != top) node = node->owningBlock()->owningNode();
  return node;
}

enum class CallRole { Inline, Layer, Glue };

using Decide = std::function<CallRole(const std::string& path, const jit::Module& callee)>;

// Inlining and folding end when nothing changes; a bound on the passes keeps a graph that
// ConstantPropagation keeps reporting as changed from looping.
constexpr int kMaxPasses = 100000;

struct Cut {
  int passes = 0;
  std::shared_ptr<jit::Graph> graph;  // forward with the inlined methods
  std::vector<jit::Node*> layer_calls;
  std::vector<std::string> layer_call_paths;
};

// A module's settings (bool, int, float, string or None attributes other than `training`, which
// headroom switches) as constants, then constant propagation: branches on them are resolved.
// Returns whether anything changed.
bool fold_settings(std::shared_ptr<jit::Graph>& graph, const jit::Module& module) {
  const jit::Value* self = graph->inputs()[0];
  std::set<std::string> assigned;
  std::vector<jit::Node*> reads;
  std::function<void(jit::Block*)> visit = [&](jit::Block* block) {
    for (jit::Node* node : block->nodes()) {
      for (jit::Block* inner : node->blocks()) visit(inner);
      if (node->kind() == c10::prim::SetAttr) assigned.insert(node->s(c10::attr::name));
      if (node->kind() != c10::prim::GetAttr) continue;
      const auto kind = node->output()->type()->kind();
      if (kind == c10::TypeKind::BoolType || kind == c10::TypeKind::IntType || kind == c10::TypeKind::FloatType ||
          kind == c10::TypeKind::StringType || kind == c10::TypeKind::NoneType) {
        reads.push_back(node);
      }
    }
  };
  visit(graph->block());
  bool changed = false;
  for (jit::Node* node : reads) {
    const std::string& name = node->s(c10::attr::name);
    if (name == "training" || assigned.count(name) > 0) continue;
    const auto path = module_path(node->input(0), self);
    if (!path) continue;
    const auto owner = submodule_at(module, *path);
    if (!owner || !owner->hasattr(name)) continue;
    jit::WithInsertPoint here(node);
    jit::Value* constant = graph->insertConstant(owner->attr(name));
    node->output()->replaceAllUsesWith(constant);
    node->destroy();
    changed = true;
  }
  // Also where nothing was folded: an inlined helper or function called with a constant (F.relu's
  // `if inplace:`, a method's default argument) leaves branches on constants.
  return jit::ConstantPropagation(graph) || changed;
}

// The forward with every call `decide` inlines replaced by its body. Returns an error line instead
// where a call that should be inlined or be a layer sits inside control flow.
std::variant<Cut, std::string> inline_calls(const jit::Module& module, const Decide& decide) {
  Cut cut;
  cut.graph = module.get_method("forward").graph()->copy();
  jit::Graph& graph = *cut.graph;
  const jit::Value* self = graph.inputs()[0];
  const auto callee_of = [&](const jit::Node* node) -> std::optional<std::pair<std::string, jit::Module>> {
    const auto path = module_path(node->input(0), self);
    if (!path) return std::nullopt;
    auto callee = submodule_at(module, *path);
    if (!callee) return std::nullopt;
    return std::make_pair(*path, *callee);
  };
  for (bool changed = true, first = true; changed; first = false) {
    if (!first && ++cut.passes > kMaxPasses) {
      return "forward does not settle into calls and ops after " + std::to_string(kMaxPasses) + " passes of inlining";
    }
    changed = false;
    for (jit::Node* node : graph.nodes()) {
      if (node->kind() != c10::prim::CallMethod) continue;
      const auto callee = callee_of(node);
      if (!callee) {
        return "forward calls " + node->s(c10::attr::name) + " on an object it does not reach through the module's "
               "attributes (" + where(node) + ")";
      }
      if (decide(callee->first, callee->second) != CallRole::Inline) continue;
      jit::Function& function = callee->second.get_method(node->s(c10::attr::name)).function();
      // The callee's graph as written (not its optimized one, which would inline every call below it).
      jit::inlineCallTo(node, &jit::toGraphFunction(function), /*use_graph=*/false);
      changed = true;
      break;
    }
    // Functions it calls (torch.nn.functional's, the module's own helpers) are ops like any other.
    for (jit::Node* node : graph.nodes()) {
      if (changed || node->kind() != c10::prim::CallFunction) continue;
      const auto function_type = node->input(0)->type()->cast<c10::FunctionType>();
      if (!function_type) continue;
      node->removeInput(0);  // the function itself; what remains are its arguments
      jit::inlineCallTo(node, &jit::toGraphFunction(*function_type->function()), /*use_graph=*/false);
      changed = true;
      break;  // the node is gone; the walk starts again
    }
    // A branch on a setting the module was built with (`if self.use_res_connect:`) is fixed for
    // this module: it is folded, and what it calls is in the step unconditionally.
    if (!changed) changed = fold_settings(cut.graph, module);
  }
  // A layer inside an `if` or a loop would run or not, or run a count of times, that only the data
  // decides: there is no fixed list of layers to profile and plan.
  std::function<std::optional<std::string>(const jit::Block*, const jit::Node*)> nested_call =
      [&](const jit::Block* block, const jit::Node* owner) -> std::optional<std::string> {
    for (const jit::Node* node : block->nodes()) {
      if (node->kind() == c10::prim::CallMethod) {
        const auto callee = callee_of(node);
        if (!callee || decide(callee->first, callee->second) != CallRole::Glue) {
          const std::string name = callee ? (callee->first.empty() ? "its own method " + node->s(c10::attr::name) : callee->first)
                                          : node->s(c10::attr::name);
          const std::string construct = owner->kind() == c10::prim::Loop ? "a loop" : "an if";
          return "forward calls " + name + " inside " + construct + " (" + where(owner) + "), whose " +
                 (owner->kind() == c10::prim::Loop ? "count" : "branch") + " the data decides: headroom cannot make "
                 "it a fixed layer; pick a --depth or --layers above it";
        }
      }
      for (const jit::Block* inner : node->blocks()) {
        if (auto found = nested_call(inner, owner)) return found;
      }
    }
    return std::nullopt;
  };
  for (jit::Node* node : graph.nodes()) {
    for (const jit::Block* block : node->blocks()) {
      if (auto found = nested_call(block, node)) return *found;
    }
    if (node->kind() != c10::prim::CallMethod) continue;
    const auto callee = callee_of(node);
    if (decide(callee->first, callee->second) == CallRole::Layer) {
      cut.layer_calls.push_back(node);
      cut.layer_call_paths.push_back(callee->first);
    }
  }
  return cut;
}

Cut inline_or_throw(const jit::Module& module, const Decide& decide) {
  auto result = inline_calls(module, decide);
  if (auto* error = std::get_if<std::string>(&result)) throw core::InputError(*error);
  return std::get<Cut>(std::move(result));
}

// Which calls become layers.
Cut choose_layers(const jit::Module& module, const LayerSelection& selection) {
  if (!selection.paths.empty()) {
    for (std::size_t i = 0; i < selection.paths.size(); ++i) {
      const std::string& path = selection.paths[i];
      if (path.empty() || !submodule_at(module, path)) {
        throw core::InputError("layers: '" + path + "' is not a submodule of the module (name them by dotted path, "
                               "e.g. layer2.1 or features.3)");
      }
      for (std::size_t j = 0; j < selection.paths.size(); ++j) {
        if (i == j) continue;
        if (selection.paths[j] == path) throw core::InputError("layers: '" + path + "' is named twice");
        if (selection.paths[j].rfind(path + ".", 0) == 0) {
          throw core::InputError("layers: '" + path + "' and its submodule '" + selection.paths[j] +
                                 "' are both named; a layer is one or the other");
        }
      }
    }
    const auto named = [&](const std::string& path) {
      return std::find(selection.paths.begin(), selection.paths.end(), path) != selection.paths.end();
    };
    const auto ancestor = [&](const std::string& path) {
      return path.empty() || std::any_of(selection.paths.begin(), selection.paths.end(),
                                         [&](const std::string& p) { return p.rfind(path + ".", 0) == 0; });
    };
    Cut cut = inline_or_throw(module, [&](const std::string& path, const jit::Module&) {
      return ancestor(path) ? CallRole::Inline : named(path) ? CallRole::Layer : CallRole::Glue;
    });
    for (const auto& path : selection.paths) {
      if (std::find(cut.layer_call_paths.begin(), cut.layer_call_paths.end(), path) == cut.layer_call_paths.end()) {
        std::string called;
        for (const auto& c : cut.layer_call_paths) called += (called.empty() ? "" : ", ") + c;
        throw core::InputError("layers: forward never calls '" + path + "' (the named layers it calls: " +
                               (called.empty() ? std::string("none") : called) + ")");
      }
    }
    return cut;
  }
  return inline_or_throw(module, [&](const std::string& path, const jit::Module& callee) {
    return depth_of(path) < selection.depth && (path.empty() || has_children(callee)) ? CallRole::Inline : CallRole::Layer;
  });
}

// Values each layer that reads them computes again rather than receiving them from an earlier
// layer: constants, attributes, sizes, and what is computed from those and the batch's inputs alone
// (an attention mask made from the mask input, a causal mask sliced from a buffer to a length).
// Then the blocks of a model with several inputs still cut where one tensor carries everything
// forward; a value made that way is deterministic and cheap next to a layer.
class Recomputable {
 public:
  Recomputable(jit::Graph& graph, const jit::AliasDb& aliases, const std::set<std::string>& assigned)
      : aliases_(aliases), assigned_(assigned) {
    // A tensor forward's own code writes into in place (a buffer it counts with, a mask it edits)
    // is read where it is. The layer calls alias analysis cannot see into, and takes to write into
    // everything they are given; were one to write into a recomputed value, the layers after it
    // would read the value unchanged, which the probe against the module's forward would show.
    std::function<void(jit::Block*)> collect = [&](jit::Block* block) {
      for (jit::Node* node : block->nodes()) {
        if (node->kind() != c10::prim::CallMethod && aliases.isMutable(node)) writers_.push_back(node);
        for (jit::Block* inner : node->blocks()) collect(inner);
      }
    };
    collect(graph.block());
    for (std::size_t i = 1; i < graph.inputs().size(); ++i) {
      if (!written(graph.inputs()[i])) tensors_.insert(graph.inputs()[i]);
    }
    for (const jit::Node* node : graph.nodes()) {
      if (!decide(node)) continue;
      nodes_.insert(node);
      for (const jit::Value* out : node->outputs()) {
        if (contains_tensor(out->type())) tensors_.insert(out);
      }
    }
  }
  bool operator()(const jit::Node* node) const { return nodes_.count(node) > 0; }

 private:
  bool decide(const jit::Node* node) const {
    if (node->kind() == c10::prim::Constant) return true;
    // An attribute forward also assigns (a counter) is read where it is written, not again later.
    // Only assignments in the inlined code are seen; a layer's own forward is not looked into.
    if (node->kind() == c10::prim::GetAttr) {
      return assigned_.count(node->s(c10::attr::name)) == 0 && !(contains_tensor(node->output()->type()) && written(node->output()));
    }
    if (!node->blocks().empty() || node->kind() == c10::prim::CallMethod || node->kind() == c10::prim::CallFunction) return false;
    if (node->hasSideEffects() || node->isNondeterministic()) return false;
    if (const auto* schema = node->maybeSchema(); schema != nullptr && schema->is_mutable()) return false;
    for (const jit::Value* out : node->outputs()) {
      if (contains_tensor(out->type()) ? written(out) : aliases_.hasWriters(out)) return false;
    }
    static const std::set<std::string> metadata = {"aten::size", "aten::dim", "aten::numel", "aten::len", "prim::device",
                                                    "prim::dtype", "prim::shape"};
    if (metadata.count(node->kind().toQualString()) > 0) return true;
    // Tensors in: the batch's inputs, attributes, or what is computed from those alone (not an
    // earlier layer's output); anything else in: a value recomputed itself.
    for (const jit::Value* in : node->inputs()) {
      if (contains_tensor(in->type()) ? tensors_.count(in) == 0
                                      : in->node()->kind() != c10::prim::Param && nodes_.count(in->node()) == 0) {
        return false;
      }
    }
    return true;
  }

  bool written(const jit::Value* value) const {
    for (jit::Node* node : writers_) {
      if (aliases_.writesToAlias(node, {value})) return true;
    }
    return false;
  }

  const jit::AliasDb& aliases_;
  const std::set<std::string>& assigned_;
  std::vector<jit::Node*> writers_;
  std::unordered_set<const jit::Value*> tensors_;
  std::unordered_set<const jit::Node*> nodes_;
};

// Whether running a node earlier or later than written could change a result: it writes in place,
// has side effects or draws random numbers.
bool order_matters(const jit::Node* node) {
  const auto* schema = node->maybeSchema();
  return node->hasSideEffects() || node->isNondeterministic() || (schema != nullptr && schema->is_mutable()) ||
         node->kind() == c10::prim::CallMethod || node->kind() == c10::prim::CallFunction || !node->blocks().empty();
}

struct Piece {
  std::vector<jit::Node*> nodes;  // in program order
  jit::Node* call = nullptr;      // the layer call, last of nodes; null for glue
  std::string path;
};

std::string op_name(const std::vector<jit::Node*>& nodes) {
  for (const jit::Node* node : nodes) {
    if (node->kind().is_aten()) return node->kind().toUnqualString();
  }
  return nodes.empty() ? "glue" : nodes.front()->kind().toUnqualString();
}

}  // namespace

std::optional<jit::Module> submodule_at(const jit::Module& module, const std::string& path) {
  jit::Module current = module;
  std::size_t start = 0;
  while (start < path.size()) {
    const auto end = std::min(path.find('.', start), path.size());
    const std::string name = path.substr(start, end - start);
    if (!current.hasattr(name)) return std::nullopt;
    const c10::IValue attribute = current.attr(name);
    if (!attribute.isModule()) return std::nullopt;
    current = attribute.toModule();
    start = end + 1;
  }
  return current;
}

namespace {

// The one tensor the loss reads: forward's output, or the chosen element of the tuple it builds.
void pick_output(jit::Graph& graph, int index) {
  jit::Value* out = graph.outputs()[0];
  const auto tuple = out->type()->cast<c10::TupleType>();
  if (!tuple) {
    if (out->type()->kind() != c10::TypeKind::TensorType) {
      throw core::InputError("the module's forward returns " + out->type()->annotation_str() + ", not a tensor");
    }
    if (index >= 0) throw core::InputError("output-index: the module's forward returns one tensor, not a tuple");
    return;
  }
  const std::string what = "the module's forward returns " + out->type()->annotation_str();
  if (tuple->elements().empty()) throw core::InputError(what + ": an empty tuple has nothing for the loss to read");
  if (index < 0) {
    // A named tuple's fields, so the user sees which index is the logits.
    std::string fields;
    if (const auto names = tuple->names()) {
      for (std::size_t i = 0; i < names->size(); ++i) {
        fields += (i > 0 ? ", " : ": ") + std::to_string(i) + " " + std::string((*names)[i]);
      }
    }
    throw core::InputError(what + ": name the element the loss reads with --output-index (0 to " +
                           std::to_string(tuple->elements().size() - 1) + fields + ")");
  }
  if (index >= static_cast<int>(tuple->elements().size())) {
    throw core::InputError("output-index: " + std::to_string(index) + " is past the " +
                           std::to_string(tuple->elements().size()) + " elements of the " + out->type()->annotation_str() +
                           " forward returns");
  }
  if (out->node()->kind() != c10::prim::TupleConstruct) {
    throw core::InputError(what + " made by " + std::string(out->node()->kind().toQualString()) + " (" + where(out->node()) +
                           "): --output-index picks from a tuple forward builds itself");
  }
  jit::Value* element = out->node()->input(static_cast<std::size_t>(index));
  if (element->type()->kind() != c10::TypeKind::TensorType) {
    throw core::InputError("output-index: element " + std::to_string(index) + " of what forward returns is a " +
                           element->type()->annotation_str() + ", not a tensor");
  }
  jit::Node* built = out->node();
  graph.return_node()->replaceInput(0, element);
  // The other elements are computed still (what computes them may do more); only the tuple goes.
  if (!built->hasUses()) built->destroy();
}

// The attributes forward's code assigns anywhere, blocks included.
void collect_assignments(const jit::Block* block, std::set<std::string>& assigned) {
  for (const jit::Node* node : block->nodes()) {
    if (node->kind() == c10::prim::SetAttr) assigned.insert(node->s(c10::attr::name));
    for (const jit::Block* inner : node->blocks()) collect_assignments(inner, assigned);
  }
}

// The submodules a node calls, itself or in its blocks, each noted once in `called`.
void note_called_modules(const jit::Node* node, const jit::Value* self, std::vector<std::string>& called) {
  if (node->kind() == c10::prim::CallMethod) {
    const auto path = module_path(node->input(0), self);
    if (path && !path->empty() && std::find(called.begin(), called.end(), *path) == called.end()) {
      called.push_back(*path);
    }
  }
  for (const jit::Block* b : node->blocks()) {
    for (const jit::Node* inner : b->nodes()) note_called_modules(inner, self, called);
  }
}

// One layer's own graph, (the module, what it reads...) -> what it hands on, copied node by node
// from the inlined forward.
class SegmentGraphBuilder {
 public:
  // `piece_of`: the piece each top-level node of `forward` belongs to; values of the other nodes are
  // recomputable, copied into the layer that reads them.
  SegmentGraphBuilder(const jit::Graph& forward, const std::unordered_map<const jit::Node*, int>& piece_of,
                      const std::string& name)
      : top_(forward.block()), piece_of_(piece_of), name_(name), graph_(std::make_shared<jit::Graph>()) {
    const jit::Value* self = forward.inputs()[0];
    mapped_[self] = graph_->addInput("self")->setType(self->type());
  }

  void add_input(const jit::Value* v) { mapped_[v] = graph_->addInput()->setType(v->type()); }

  void append(jit::Node* node) {
    // Outer values its blocks read are mapped as the clone reaches them; copies of recomputable
    // ones are appended at the top level, ahead of the node, which is appended after.
    for (jit::Value* in : node->inputs()) map(in);
    jit::Node* copy = graph_->createClone(node, [this](jit::Value* v) { return map(v); });
    graph_->appendNode(copy);
    for (std::size_t i = 0; i < node->outputs().size(); ++i) mapped_[node->output(i)] = copy->output(i);
  }

  std::shared_ptr<jit::Graph> finish(const jit::Value* output) {
    graph_->registerOutput(mapped_.at(output));
    return graph_;
  }

 private:
  jit::Value* map(jit::Value* v) {
    const auto it = mapped_.find(v);
    if (it != mapped_.end()) return it->second;
    if (piece_of_.count(top_level(v->node(), top_)) > 0) {
      throw std::logic_error("script_graph: " + name_ + " reads " + v->debugName() + " without an input for it");
    }
    // A recomputable value: its node is copied here, ahead of its reader.
    jit::Node* copy = graph_->createClone(v->node(), [this](jit::Value* x) { return map(x); });
    graph_->appendNode(copy);
    for (std::size_t i = 0; i < v->node()->outputs().size(); ++i) mapped_[v->node()->output(i)] = copy->output(i);
    return mapped_.at(v);
  }

  const jit::Block* top_;
  const std::unordered_map<const jit::Node*, int>& piece_of_;
  const std::string& name_;
  std::shared_ptr<jit::Graph> graph_;
  std::unordered_map<const jit::Value*, jit::Value*> mapped_;
};

// Cuts the inlined forward into layers, phase by phase: the pieces of program order (each layer call
// with the functional code before it), glue split off where a piece hands on more than its call's
// result, what each piece hands on checked, then one graph per layer.
class LayerCutter {
 public:
  LayerCutter(const jit::Module& module, const LayerSelection& selection)
      : module_(module), selection_(selection), cut_(choose_layers(module, selection)), graph_(*cut_.graph),
        self_(graph_.inputs()[0]) {}

  ScriptGraph cut() {
    check_inputs();
    pick_output(graph_, selection_.output_index);
    if (cut_.layer_calls.empty()) {
      throw core::InputError("the module's forward calls no submodule to profile as a layer (it is one operation "
                             "on its input): wrap it in a module with children");
    }
    split_into_pieces();
    split_off_glue();
    const std::vector<const jit::Value*> output_of = piece_outputs();
    // Pieces whose result nothing reads (and that change nothing) are dropped; the rest are the
    // layers, numbered in order.
    ScriptGraph result;
    std::vector<int> layer_of(pieces_.size(), -1);
    for (std::size_t p = 0; p < pieces_.size(); ++p) {
      if (output_of[p] == nullptr) continue;
      layer_of[p] = static_cast<int>(result.segments.size());
      result.segments.emplace_back();
    }
    check_last_layer_returns(output_of, layer_of, result.segments.size());
    std::map<std::string, int> name_count;
    for (std::size_t p = 0; p < pieces_.size(); ++p) {
      if (layer_of[p] < 0) continue;
      ScriptSegment& segment = result.segments[static_cast<std::size_t>(layer_of[p])];
      name_segment(p, segment, result.layer_paths, name_count);
      build_segment_graph(p, segment, output_of, layer_of);
    }
    assign_blocks(result, {});
    return result;
  }

 private:
  void check_inputs() const {
    if (graph_.inputs().size() < 2) throw core::InputError("the module's forward reads no input");
    if (graph_.inputs().size() - 1 > static_cast<std::size_t>(core::kMaxModelInputs)) {
      throw core::InputError("the module's forward reads " + std::to_string(graph_.inputs().size() - 1) + " inputs; headroom "
                             "gives a module at most " + std::to_string(core::kMaxModelInputs));
    }
    for (std::size_t i = 1; i < graph_.inputs().size(); ++i) {
      const jit::Value* in = graph_.inputs()[i];
      if (in->type()->kind() != c10::TypeKind::TensorType) {
        throw core::InputError("the module's forward takes " + in->debugName() + " as " + in->type()->annotation_str() +
                               ": headroom gives each input a batch of tensors (--input per input)");
      }
    }
  }

  // The batch's inputs, in forward's order: input k is core::model_input_id(k) to the layers.
  int input_index(const jit::Value* v) const {
    for (std::size_t i = 1; i < graph_.inputs().size(); ++i) {
      if (graph_.inputs()[i] == v) return static_cast<int>(i) - 1;
    }
    return -1;
  }
  bool is_input(const jit::Value* v) const { return input_index(v) >= 0; }

  // Program order: the functional code since the previous layer goes with the next layer call.
  void split_into_pieces() {
    const jit::AliasDb aliases(cut_.graph);
    std::set<std::string> assigned;
    collect_assignments(graph_.block(), assigned);
    const Recomputable recomputable(graph_, aliases, assigned);
    const std::unordered_set<const jit::Node*> calls(cut_.layer_calls.begin(), cut_.layer_calls.end());
    Piece current;
    std::size_t k = 0;
    for (jit::Node* node : graph_.nodes()) {
      if (calls.count(node) > 0) {
        current.nodes.push_back(node);
        current.call = node;
        current.path = cut_.layer_call_paths[k++];
        pieces_.push_back(std::move(current));
        current = Piece{};
      } else if (!recomputable(node)) {
        current.nodes.push_back(node);
      }
    }
    if (!current.nodes.empty()) pieces_.push_back(std::move(current));
  }

  // Which piece defines each value, and which values each piece reads from outside itself (values
  // of recomputable nodes are followed to what they are computed from).
  void index_pieces() {
    piece_of_.clear();
    for (std::size_t p = 0; p < pieces_.size(); ++p) {
      for (const jit::Node* node : pieces_[p].nodes) piece_of_[node] = static_cast<int>(p);
    }
    reads_.assign(pieces_.size(), {});
    for (std::size_t p = 0; p < pieces_.size(); ++p) note_reads(p);
  }

  void note_reads(std::size_t p) {
    std::unordered_set<const jit::Value*> seen;
    std::function<void(const jit::Value*)> read = [&](const jit::Value* v) {
      if (v == self_ || !seen.insert(v).second) return;
      if (is_input(v)) {
        reads_[p].push_back(v);
        return;
      }
      const jit::Node* owner = top_level(v->node(), graph_.block());
      const auto it = piece_of_.find(owner);
      if (it == piece_of_.end()) {
        for (const jit::Value* in : owner->inputs()) read(in);  // recomputable
      } else if (it->second != static_cast<int>(p)) {
        reads_[p].push_back(v);
      }
    };
    std::function<void(const jit::Node*)> visit = [&](const jit::Node* node) {
      for (const jit::Value* in : node->inputs()) read(in);
      for (const jit::Block* block : node->blocks()) {
        for (const jit::Node* inner : block->nodes()) visit(inner);
        visit(block->return_node());
      }
    };
    for (const jit::Node* node : pieces_[p].nodes) visit(node);
  }

  // The values a piece hands on: read by a later piece or returned.
  std::vector<const jit::Value*> handed_on(std::size_t p) const {
    std::vector<const jit::Value*> out;
    const auto add = [&](const jit::Value* v) {
      if (is_input(v) || v == self_) return;
      const auto it = piece_of_.find(top_level(v->node(), graph_.block()));
      if (it != piece_of_.end() && it->second == static_cast<int>(p) && std::find(out.begin(), out.end(), v) == out.end()) {
        out.push_back(v);
      }
    };
    for (std::size_t q = p + 1; q < pieces_.size(); ++q) {
      for (const jit::Value* v : reads_[q]) add(v);
    }
    std::unordered_set<const jit::Value*> seen;
    std::function<void(const jit::Value*)> returned = [&](const jit::Value* v) {
      if (!seen.insert(v).second || v == self_ || is_input(v)) return;
      const jit::Node* owner = top_level(v->node(), graph_.block());
      if (piece_of_.count(owner) == 0) {
        for (const jit::Value* in : owner->inputs()) returned(in);
      } else {
        add(v);
      }
    };
    returned(graph_.outputs()[0]);
    return out;
  }

  // A piece hands on one tensor. Where its functional code computes something more that later layers
  // read (an attention mask every block reads), that code becomes a glue layer of its own before it.
  void split_off_glue() {
    for (bool split = true; split;) {
      split = false;
      index_pieces();
      for (std::size_t p = 0; p < pieces_.size() && !split; ++p) split = split_glue_from(p);
    }
  }

  // Whether piece p had glue to split off (the pieces then need indexing again).
  bool split_glue_from(std::size_t p) {
    std::vector<const jit::Value*> glue_out;
    for (const jit::Value* v : handed_on(p)) {
      if (pieces_[p].call == nullptr || v->node() != pieces_[p].call) glue_out.push_back(v);
    }
    if (pieces_[p].call == nullptr || glue_out.empty()) return false;
    // The glue that computes them, within this piece.
    std::unordered_set<const jit::Node*> slice;
    for (const jit::Value* v : glue_out) add_computing(v, p, slice);
    Piece glue, rest;
    rest.call = pieces_[p].call;
    rest.path = pieces_[p].path;
    // The glue moves ahead of the rest of the piece: nothing it passes may depend on the order.
    const jit::Node* passed = nullptr;
    for (jit::Node* node : pieces_[p].nodes) {
      if (slice.count(node) > 0) {
        const jit::Node* conflict = order_matters(node) ? node : passed;
        if (conflict != nullptr) {
          throw core::InputError("the functional code before " + pieces_[p].path + " computes a value that later "
                                 "layers read, next to code whose order matters (" + where(conflict) +
                                 "): headroom cannot move it into a layer of its own; pick another --depth or --layers");
        }
        glue.nodes.push_back(node);
      } else {
        if (order_matters(node) && node != pieces_[p].call) passed = node;
        rest.nodes.push_back(node);
      }
    }
    pieces_[p] = std::move(rest);
    pieces_.insert(pieces_.begin() + static_cast<std::ptrdiff_t>(p), std::move(glue));
    return true;
  }

  // Adds to `slice` the nodes of piece p that `v` is computed by, through recomputable values and
  // the blocks of the nodes taken.
  void add_computing(const jit::Value* v, std::size_t p, std::unordered_set<const jit::Node*>& slice) const {
    if (v == self_ || is_input(v)) return;
    const jit::Node* owner = top_level(v->node(), graph_.block());
    const auto it = piece_of_.find(owner);
    if (it == piece_of_.end()) {
      for (const jit::Value* in : owner->inputs()) add_computing(in, p, slice);
    } else if (it->second == static_cast<int>(p) && slice.insert(owner).second) {
      for (const jit::Value* in : owner->inputs()) add_computing(in, p, slice);
      for (const jit::Block* block : owner->blocks()) add_computing_in(block, p, slice);
    }
  }

  void add_computing_in(const jit::Block* block, std::size_t p, std::unordered_set<const jit::Node*>& slice) const {
    for (const jit::Node* n : block->nodes()) {
      for (const jit::Value* in : n->inputs()) add_computing(in, p, slice);
      for (const jit::Block* b : n->blocks()) add_computing_in(b, p, slice);
    }
    for (const jit::Value* in : block->return_node()->inputs()) add_computing(in, p, slice);
  }

  // The piece as error lines name it.
  std::string label(std::size_t p) const {
    return pieces_[p].call != nullptr    ? pieces_[p].path
           : p + 1 < pieces_.size()      ? "the functional code before " + pieces_[p + 1].path
                                         : "the functional code after the last layer";
  }

  // The one tensor each piece hands on; null for trailing functional code whose result nothing reads.
  std::vector<const jit::Value*> piece_outputs() const {
    std::vector<const jit::Value*> output_of(pieces_.size());
    for (std::size_t p = 0; p < pieces_.size(); ++p) {
      const auto out = handed_on(p);
      const Piece& piece = pieces_[p];
      if (out.size() > 1) {
        std::string names;
        for (const jit::Value* v : out) names += (names.empty() ? "" : ", ") + v->debugName();
        throw core::InputError((piece.call != nullptr ? "the code around " : "") + label(p) + " computes " + std::to_string(out.size()) + " values that "
                               "later layers read (" + names + ", " + where(out[0]->node()) + "): a layer hands on one; "
                               "pick another --depth or --layers");
      }
      const jit::Value* handed = out.empty() ? (piece.call != nullptr ? piece.call->output(0) : nullptr) : out[0];
      if (handed == nullptr) {
        // Functional code after the last layer whose result nothing reads: dropped, unless it does
        // something besides computing that result.
        for (const jit::Node* node : piece.nodes) {
          if (order_matters(node)) {
            throw core::InputError("forward does more after its output is computed (" + where(node) + "): headroom "
                                   "runs the layers up to the output and cannot run it");
          }
        }
        continue;
      }
      if (handed->type()->kind() != c10::TypeKind::TensorType) {
        throw core::InputError(label(p) + " hands a " + handed->type()->annotation_str() + " to later layers (" +
                               where(handed->node()) + "): only a tensor can pass from one layer to the next; pick "
                               "another --depth or --layers");
      }
      output_of[p] = handed;
    }
    return output_of;
  }

  void check_last_layer_returns(const std::vector<const jit::Value*>& output_of, const std::vector<int>& layer_of,
                                std::size_t layers) const {
    const jit::Value* returned = graph_.outputs()[0];
    const jit::Node* owner = top_level(returned->node(), graph_.block());
    const auto it = piece_of_.find(owner);
    if (is_input(returned) || it == piece_of_.end() || output_of[static_cast<std::size_t>(it->second)] != returned ||
        layer_of[static_cast<std::size_t>(it->second)] != static_cast<int>(layers) - 1) {
      throw core::InputError("the module's output is not computed by its last layer: headroom runs the layers in "
                             "order and the loss reads the last one's output" +
                             std::string(selection_.output_index >= 0 ? " (with --output-index, the element the loss reads "
                                                                        "must be the last one forward computes)"
                                                                      : ""));
    }
  }

  void name_segment(std::size_t p, ScriptSegment& segment, std::vector<std::string>& layer_paths,
                    std::map<std::string, int>& name_count) const {
    const Piece& piece = pieces_[p];
    const std::string base = piece.call != nullptr ? piece.path : "glue:" + op_name(piece.nodes);
    const int n = ++name_count[base];
    segment.name = n == 1 ? base : base + "#" + std::to_string(n);
    segment.module_path = piece.call != nullptr ? piece.path : "";
    if (piece.call != nullptr) {
      const auto callee = submodule_at(module_, piece.path);
      const auto type_name = callee->type()->name();
      segment.class_name = type_name ? type_name->name() : "module";
      if (std::find(layer_paths.begin(), layer_paths.end(), piece.path) == layer_paths.end()) {
        layer_paths.push_back(piece.path);
      }
    } else {
      segment.class_name = "glue";
    }
  }

  // Its own graph: (the module, what it reads...) -> what it hands on; with the producers of what it
  // reads and the submodules it calls.
  void build_segment_graph(std::size_t p, ScriptSegment& segment, const std::vector<const jit::Value*>& output_of,
                           const std::vector<int>& layer_of) const {
    SegmentGraphBuilder builder(graph_, piece_of_, segment.name);
    for (const jit::Value* v : reads_[p]) {
      int producer = core::model_input_id(std::max(input_index(v), 0));
      if (!is_input(v)) {
        const int from = piece_of_.at(top_level(v->node(), graph_.block()));
        if (output_of[static_cast<std::size_t>(from)] != v) {
          throw core::InputError(segment.name + " reads " + v->debugName() + " (" + where(v->node()) + "), which is " +
                                 "not what an earlier layer hands on");
        }
        producer = layer_of[static_cast<std::size_t>(from)];
      }
      segment.inputs.push_back(producer);
      builder.add_input(v);
    }
    for (jit::Node* node : pieces_[p].nodes) {
      builder.append(node);
      note_called_modules(node, self_, segment.called_modules);
    }
    segment.graph = builder.finish(output_of[p]);
  }

  const jit::Module& module_;
  const LayerSelection& selection_;
  Cut cut_;
  jit::Graph& graph_;  // the inlined forward, *cut_.graph
  const jit::Value* self_;
  std::vector<Piece> pieces_;
  std::unordered_map<const jit::Node*, int> piece_of_;
  std::vector<std::vector<const jit::Value*>> reads_;  // per piece, what it reads from outside itself
};

ScriptGraph cut_with(const jit::Module& module, const LayerSelection& selection) {
  return LayerCutter(module, selection).cut();
}

std::size_t layers_with_parameters(const jit::Module& module, const ScriptGraph& graph) {
  std::size_t n = 0;
  for (const auto& segment : graph.segments) {
    if (!segment.module_path.empty() && parameter_count(*submodule_at(module, segment.module_path)) > 0) ++n;
  }
  return n;
}

}  // namespace

ScriptGraph cut_into_layers(const jit::Module& module, const LayerSelection& selection) {
  if (selection.depth < 0 || selection.depth > kMaxDepth) {
    throw core::InputError("depth: " + std::to_string(selection.depth) + " is not from 1 to " + std::to_string(kMaxDepth));
  }
  if (selection.depth > 0 || !selection.paths.empty()) {
    ScriptGraph cut = cut_with(module, selection);
    cut.depth = selection.depth;
    return cut;
  }
  // The default: the shallowest depth with enough layers that hold parameters to plan with, or the
  // deepest that can be cut where a deeper one cannot (a list of tensors passed between blocks).
  // The depth is recorded with the model, so rebuilding it from a trace cuts it the same way.
  std::optional<ScriptGraph> shallower;
  for (int depth = 1; depth <= kMaxDepth; ++depth) {
    ScriptGraph deeper;
    try {
      deeper = cut_with(module, LayerSelection{depth, {}, selection.output_index});
    } catch (const core::InputError&) {
      if (!shallower) throw;
      break;
    }
    deeper.depth = depth;
    const bool enough = layers_with_parameters(module, deeper) >= static_cast<std::size_t>(kDefaultLayers);
    // A layer a level down (a ModuleList's blocks.0) is the same at this depth and the next; only
    // where no layer has submodules is there nothing below.
    bool below = false;
    for (const auto& segment : deeper.segments) {
      below = below || (!segment.module_path.empty() && has_children(*submodule_at(module, segment.module_path)));
    }
    if (!shallower || deeper.layer_paths != shallower->layer_paths) shallower = std::move(deeper);
    if (enough || !below) break;
  }
  return std::move(*shallower);
}

void fold_dtypes(ScriptGraph& graph, const std::vector<c10::ScalarType>& output_dtypes) {
  for (auto& segment : graph.segments) {
    jit::Graph& g = *segment.graph;
    for (std::size_t k = segment.inputs.size(); k-- > 0;) {
      const int producer = segment.inputs[k];
      if (producer < 0 || static_cast<std::size_t>(producer) >= output_dtypes.size()) continue;
      jit::Value* in = g.inputs()[k + 1];
      std::vector<jit::Node*> dtype_reads;
      for (const jit::Use& use : in->uses()) {
        if (use.user->kind() == c10::prim::dtype) dtype_reads.push_back(use.user);
      }
      const c10::ScalarType seen = output_dtypes[static_cast<std::size_t>(producer)];
      for (jit::Node* read : dtype_reads) {
        jit::Value* dtype = nullptr;
        if (seen == c10::ScalarType::Float) {
          if (!segment.reads_activation_dtype) {
            g.addInput("activation_dtype")->setType(c10::IntType::get());
            segment.reads_activation_dtype = true;
          }
          dtype = g.inputs().back();
        } else {
          jit::WithInsertPoint at(read);
          dtype = g.insertConstant(static_cast<std::int64_t>(seen));
        }
        read->output()->replaceAllUsesWith(dtype);
        read->destroy();
      }
      if (in->uses().empty()) {
        g.eraseInput(k + 1);
        segment.inputs.erase(segment.inputs.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
  }
}

void assign_blocks(ScriptGraph& graph, const std::vector<std::vector<int>>& written) {
  // A cut before layer i where what layers from i on read of the earlier ones is one tensor, and
  // no layer after the cut writes into an earlier layer's output in place (a checkpoint's second run
  // would read it changed).
  auto& segments = graph.segments;
  const std::size_t n = segments.size();
  if (n == 0) return;
  std::vector<bool> cut_before(n, false);
  cut_before[0] = true;
  for (std::size_t i = 1; i < n; ++i) {
    std::set<int> live;
    for (std::size_t j = i; j < n; ++j) {
      for (const int input : segments[j].inputs) {
        // The batch's further inputs stay with the batch; a checkpoint reads them again from there.
        if (input < static_cast<int>(i) && !core::is_further_input(input)) live.insert(input);
      }
    }
    cut_before[i] = live.size() == 1;
  }
  for (std::size_t i = 0; i < n && i < written.size(); ++i) {
    for (const int producer : written[i]) {
      // Every cut between the producer and the writer goes: they end up in one block.
      for (std::size_t k = static_cast<std::size_t>(std::max(producer, 0)) + 1; k <= i; ++k) cut_before[k] = false;
    }
  }
  int block = -1;
  for (std::size_t i = 0; i < n; ++i) {
    if (cut_before[i]) ++block;
    segments[i].block = block;
  }
}

}  // namespace headroom::models
