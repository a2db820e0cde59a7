#include "planner/l2l_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>

#include "core/errors.h"
#include "core/units.h"
#include "planner/plan_explanation.h"
#include "planner/strategy_table.h"
#include "planner/technique.h"

namespace headroom::planner {

namespace {

std::vector<int> block_ids(const core::Trace& trace) {
  std::vector<int> blocks;
  blocks.reserve(trace.layers.size());
  for (const auto& layer : trace.layers) blocks.push_back(layer.block);
  return blocks;
}

core::L2LStages l2l_stages_of(const core::Trace& trace) {
  std::vector<std::vector<int>> inputs;
  inputs.reserve(trace.layers.size());
  for (const auto& layer : trace.layers) inputs.push_back(layer.inputs);
  return core::l2l_stages(block_ids(trace), inputs);
}

std::vector<L2LStageCost> with_parameter_bytes(const core::Trace& trace, std::vector<core::L2LStage> formed) {
  std::vector<L2LStageCost> stages;
  stages.reserve(formed.size());
  for (auto& l2l_stage : formed) {
    L2LStageCost stage;
    static_cast<core::L2LStage&>(stage) = std::move(l2l_stage);
    for (int i = stage.first; i <= stage.last; ++i) stage.parameter_bytes += trace.layers[static_cast<std::size_t>(i)].param_bytes;
    stages.push_back(std::move(stage));
  }
  return stages;
}

}  // namespace

std::vector<L2LStageCost> l2l_stage_costs(const core::Trace& trace) { return with_parameter_bytes(trace, l2l_stages_of(trace).stages); }

int first_offloaded_stage(const std::vector<L2LStageCost>& stages, const core::Trace& trace, int from_block) {
  return core::first_offloaded_stage(stages, block_ids(trace), from_block);
}

namespace {

std::int64_t scaled(std::int64_t ns, double scale) { return std::llround(static_cast<double>(ns) * scale); }

// The temporaries of one stage's optimizer step. The optimizers step a parameter at a time, so the
// whole model's step (what the trace measured) holds the most any stage's can. Adam's holds two
// tensors the size of the parameter it is at (the square root of the second moment, then that
// over the bias correction) and a few scalars: the measured steps are 2 x the largest parameter +
// 12 bytes. A stage's largest parameter is at most its largest layer's parameter bytes. Under bf16
// the masters step in pieces of at most 2^20 elements (runtime/optimizer.h): a piece's gradient
// widened to float32 and Adam's two float32 temporaries, 12 bytes an element.
std::int64_t stage_optimizer_transient(const core::CostModel& costs, const L2LStageCost& stage) {
  const std::int64_t whole = costs.optimizer_transient_bytes();
  if (costs.trace().optimizer.name != "adam") return whole;
  std::int64_t largest = 0;
  for (int i = stage.first; i <= stage.last; ++i) {
    largest = std::max(largest, costs.trace().layers[static_cast<std::size_t>(i)].param_bytes);
  }
  constexpr std::int64_t kScalars = 64;
  if (costs.trace().precision == core::Precision::Bf16) {
    const std::int64_t piece = std::min<std::int64_t>(largest / core::parameter_element_bytes(core::Precision::Bf16),
                                                      std::int64_t{1} << 20);
    return std::min(whole, 12 * piece + kScalars);
  }
  return std::min(whole, 2 * largest + kScalars);
}

// Per stage: its parameters' copy in, its gradients' copy out, and its optimizer step (the trace's
// optimizer time by parameter bytes): on the host for a offloaded stage; a kept stage (before
// `first_offloaded`) copies nothing and steps on the device (optimizer_ns: 0, device_optimizer_ns).
// A GPU trace's offloaded stages step at the host's own rate where the trace measured it: the GPU's
// optimizer time understates the host's several times over (docs/design.md, "On a GPU").
struct StageTransfers {
  std::vector<std::int64_t> in_ns, out_ns, optimizer_ns, device_optimizer_ns;
};

StageTransfers stage_transfers(const core::CostModel& costs, const std::vector<L2LStageCost>& stages, int first_offloaded) {
  const auto& device = costs.trace().device;
  const double host_ns_per_param = device.is_cuda() ? costs.trace().optimizer.host_ns_per_param : 0;
  const int element_bytes = core::parameter_element_bytes(costs.trace().precision);
  std::int64_t total = 0;
  for (const auto& stage : stages) total += stage.parameter_bytes;
  StageTransfers t;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const std::int64_t bytes = stages[s].parameter_bytes;
    const bool kept = static_cast<int>(s) < first_offloaded;
    const std::int64_t optimizer =
        total > 0 ? std::llround(static_cast<double>(costs.optimizer_ns()) * static_cast<double>(bytes) / static_cast<double>(total)) : 0;
    // L2L packs a stage's parameters (and gradients) in one buffer: one copy each way.
    t.in_ns.push_back(kept ? 0 : device.host_to_device_ns(bytes));
    t.out_ns.push_back(kept ? 0 : device.device_to_host_ns(bytes));
    const std::int64_t on_host =
        host_ns_per_param > 0 ? std::llround(host_ns_per_param * static_cast<double>(bytes) / element_bytes) : optimizer;
    t.optimizer_ns.push_back(kept ? 0 : on_host);
    t.device_optimizer_ns.push_back(kept ? optimizer : 0);
  }
  return t;
}

struct L2LLanes {
  std::int64_t step_ns = 0;
  std::int64_t copy_ns = 0;
};

// L2L's order (executor/l2l_runner.cpp): stage s loads once its copy has landed and stage s-1
// has computed, then starts the copy of the next stage; in backward the last stage stays loaded,
// each stage's gradients go out and the host optimizer steps the stage after them, one stage at a
// time. A kept stage's copies take no time, and its optimizer step is part of its backward_ns.
// `cpu` (L2LPrediction::host_shares_compute): a stage computes only once the next one's copy has
// landed, gradients go out on the compute thread, and the host optimizer's thread runs on the cores
// the compute uses, so a stage's optimizer step delays the compute as much as it takes. On CUDA the
// gradients go out on a copy stream and the optimizer steps on the host beside the compute.
L2LLanes l2l_lanes(const StageTransfers& t, const std::vector<L2LStageCost>& stages,
                       const std::vector<std::int64_t>& forward_ns, const std::vector<std::int64_t>& backward_ns,
                       bool cpu) {
  const int last = static_cast<int>(stages.size()) - 1;
  L2LLanes lanes;
  if (last < 0) return lanes;
  const auto in = [&](int s) { return t.in_ns[static_cast<std::size_t>(s)]; };
  std::int64_t compute_end = 0, copy_end = in(0), out_end = 0;
  lanes.copy_ns += in(0);
  for (int s = 0; s <= last; ++s) {
    const std::int64_t load = std::max(compute_end, copy_end);
    std::int64_t start = load;
    if (s < last) {
      copy_end = load + in(s + 1);
      lanes.copy_ns += in(s + 1);
      if (cpu) start = copy_end;
    }
    compute_end = start + forward_ns[static_cast<std::size_t>(s)];
  }
  std::int64_t host_end = 0;
  for (int s = last; s >= 0; --s) {
    const std::int64_t load = s == last ? compute_end : std::max(compute_end, copy_end);
    std::int64_t start = load;
    if (s > 0) {
      copy_end = load + in(s - 1);
      lanes.copy_ns += in(s - 1);
      if (cpu) start = copy_end;
    }
    const auto out = t.out_ns[static_cast<std::size_t>(s)], optimizer = t.optimizer_ns[static_cast<std::size_t>(s)];
    compute_end = start + backward_ns[static_cast<std::size_t>(s)];
    lanes.copy_ns += out;
    if (cpu) {
      compute_end += out + optimizer;
    } else {
      out_end = std::max(out_end, compute_end) + out;
      host_end = std::max(host_end, out_end) + optimizer;
    }
  }
  lanes.step_ns = std::max({compute_end, out_end, host_end});
  return lanes;
}

// The layer costs at a split's batch sizes. A split has at most two sizes: each size's layer costs
// are interpolated once, as the walk first asks for one of them.
class CostsByBatch {
 public:
  explicit CostsByBatch(const core::CostModel& costs) : costs_(costs) {}

  const core::LayerCost& layer(int layer, std::int64_t b) {
    auto& layers = by_batch_[b];
    if (layers.empty()) {
      for (std::size_t i = 0; i < costs_.layer_count(); ++i) layers.push_back(costs_.layer(i, b));
      scale_of_[b] = costs_.layer_time_scale(b);
    }
    return layers[static_cast<std::size_t>(layer)];
  }
  // The layer time scale at `b`, once `layer` has been asked for at `b`.
  double time_scale(std::int64_t b) { return scale_of_[b]; }
  std::int64_t output_bytes(int layer, std::int64_t b) { return this->layer(layer, b).output_bytes; }
  std::int64_t output_bytes(const std::vector<int>& layers, std::int64_t b) {
    std::int64_t bytes = 0;
    for (const int j : layers) bytes += output_bytes(j, b);
    return bytes;
  }

 private:
  const core::CostModel& costs_;
  std::map<std::int64_t, std::vector<core::LayerCost>> by_batch_;
  std::map<std::int64_t, double> scale_of_;
};

// "backward of stage 3 (layer2.qkv..layer2.ffn_ln), micro-batch 0": where a peak is.
std::string describe_l2l_op(const core::Trace& trace, OpKind kind, const L2LStageCost& stage, int s, std::size_t m) {
  const char* what = kind == OpKind::ForwardNoGrad ? "forward"
                     : kind == OpKind::Recompute   ? "recompute"
                     : kind == OpKind::Optimizer   ? "optimizer step"
                                                   : "backward";
  return std::string(what) + " of stage " + std::to_string(s) + " (" + trace.layers[static_cast<std::size_t>(stage.first)].name + ".." +
         trace.layers[static_cast<std::size_t>(stage.last)].name + "), micro-batch " + std::to_string(m);
}

// The lane busy longest and its busy time over the next lane's.
void name_busiest_lane(L2LPrediction& p) {
  const std::pair<const char*, std::int64_t> busy[] = {
      {"compute", p.compute_ns}, {"transfer", p.copy_ns}, {"host optimizer", p.host_optimizer_ns}};
  const auto* top = &busy[0];
  for (const auto& lane : busy) {
    if (lane.second > top->second) top = &lane;
  }
  std::int64_t second = 0;
  for (const auto& lane : busy) {
    if (&lane != top) second = std::max(second, lane.second);
  }
  p.bound = top->first;
  p.bound_ratio = second > 0 ? static_cast<double>(top->second) / static_cast<double>(second) : 0;
}

// A stage as its backward runs, for each of its micro-batches.
struct StageInBackward {
  int s = 0;
  const L2LStageCost& stage;
  std::int64_t params = 0;     // on the device: the kept stages', this one's and the previous one's
  std::int64_t gradients = 0;  // this stage's (and on CUDA the next one's, still crossing to the host)
  // Where a standard step lets go of the gradient arriving at each exported output (layer_graph.h).
  std::vector<std::pair<int, int>> export_released_by;  // (export, layer)
  std::int64_t host_high = 0;  // the highest the host holds during this stage's backward
};

// One prediction of L2L's step, walked as L2L runs it: forward stage by stage, then
// backward in reverse, then the host's figures and the three lanes. The members are what the
// passes share: the device's bytes by kind, the stash, the host's level, each stage's time.
class L2LStepWalk {
 public:
  L2LStepWalk(const core::CostModel& costs, const LayerGraph& graph, const std::vector<std::int64_t>& micro_batches,
              const core::L2LChoice& l2l, std::vector<L2LOp>* ops);

  L2LPrediction run() {
    forward_pass();
    backward_pass();
    finish();
    return p_;
  }

 private:
  std::int64_t param(int s) const {
    return s >= 0 && s <= last_stage_ ? stages_[static_cast<std::size_t>(s)].parameter_bytes : 0;
  }
  std::int64_t offloaded(int s) const { return s >= first_offloaded_ ? param(s) : 0; }
  // The stages kept on the device hold their parameters and optimizer state throughout; a offloaded
  // stage's parameters are there while it runs and while it is the next one.
  std::int64_t on_device(int s, int next) const { return kept_params_ + offloaded(s) + offloaded(next); }
  std::int64_t out(int layer, std::int64_t b) { return by_batch_.output_bytes(layer, b); }
  std::int64_t sum_out(const std::vector<int>& layers, std::int64_t b) { return by_batch_.output_bytes(layers, b); }

  void emit(OpKind kind, int layer, int s, std::size_t m, std::int64_t duration, std::int64_t input,
            std::int64_t parameters, std::int64_t gradients, std::int64_t activations, std::int64_t transient);
  void send(const std::vector<int>& boundaries, std::int64_t b, int s, bool forward);

  void forward_pass();
  void forward_micro_batch(int s, std::int64_t params, std::size_t m);
  void backward_pass();
  void backward_stage(int s);
  void backward_micro_batch(StageInBackward& at, std::size_t m);
  void recompute(const StageInBackward& at, std::size_t m, std::int64_t& level);
  void take_output_gradients_from_host(const L2LStageCost& stage, std::size_t m);
  void backpropagate(const StageInBackward& at, std::size_t m, std::int64_t& level);
  void keep_input_gradients_on_host(StageInBackward& at, std::size_t m);
  void release_stashed_inputs(int s, std::size_t m);
  void finish();

  const core::CostModel& costs_;
  const LayerGraph& graph_;
  const core::Trace& trace_;
  const std::vector<std::int64_t>& micro_batches_;
  std::vector<L2LOp>* ops_;
  std::vector<int> first_reader_stage_;
  std::vector<L2LStageCost> stages_;
  bool boundaries_on_host_;
  int first_offloaded_;
  StageTransfers transfers_;
  std::size_t n_;
  int last_stage_;
  CostsByBatch by_batch_;
  std::int64_t total_params_ = 0, kept_params_ = 0;
  std::int64_t kept_state_ = 0;

  L2LPrediction p_;
  std::vector<std::int64_t> forward_ns_, backward_ns_;
  // The constant-memory variant's boundary copies: L2L makes them on the compute thread (stream on CUDA), so
  // they lengthen the stage's turn (and are the transfer lane's, not the compute lane's, busy time).
  std::int64_t bring_ns_ = 0;  // brought to the device before the next op
  std::int64_t base_ = 0;      // every micro-batch's input, made as the step starts
  std::int64_t stash_ = 0;     // stashed boundaries on the device
  std::int64_t host_stash_ = 0;
  std::vector<std::vector<bool>> stashed_;

  std::int64_t boundary_grads_ = 0;  // gradients waiting at stage boundaries, on the device
  // The host, above the offloaded stages' parameters and optimizer state: the constant-memory
  // variant's stash and the boundary gradients sent there (each once, however many stages add to
  // it), and a offloaded stage's gradients from their landing to the end of its host step, with that
  // step's temporaries. On a GPU the step runs while the next stage computes, and that stage's
  // gradients land only once it is done, so two stages' never meet; on a CPU it runs in between.
  std::int64_t host_level_ = 0, host_peak_ = 0;
  std::int64_t host_step_ = 0;  // the gradients and temporaries of the host step still running
  std::vector<std::vector<bool>> gradient_on_host_;
};

L2LStepWalk::L2LStepWalk(const core::CostModel& costs, const LayerGraph& graph,
                         const std::vector<std::int64_t>& micro_batches, const core::L2LChoice& l2l,
                         std::vector<L2LOp>* ops)
    : costs_(costs), graph_(graph), trace_(costs.trace()), micro_batches_(micro_batches), ops_(ops), by_batch_(costs) {
  core::L2LStages formed = l2l_stages_of(trace_);
  first_reader_stage_ = std::move(formed.first_reader);
  stages_ = with_parameter_bytes(trace_, std::move(formed.stages));
  boundaries_on_host_ = l2l.boundaries_on_host;
  first_offloaded_ = std::max(first_offloaded_stage(stages_, trace_, l2l.from_block), 0);
  transfers_ = stage_transfers(costs_, stages_, first_offloaded_);
  n_ = micro_batches_.size();
  last_stage_ = static_cast<int>(stages_.size()) - 1;
  for (int s = 0; s <= last_stage_; ++s) {
    total_params_ += param(s);
    if (s < first_offloaded_) kept_params_ += param(s);
  }
  kept_state_ = total_params_ > 0 ? std::llround(static_cast<double>(costs_.optimizer_state_bytes()) *
                                                  static_cast<double>(kept_params_) / static_cast<double>(total_params_))
                                  : 0;
  p_.device_peak_bytes = -1;
  p_.stages = static_cast<int>(stages_.size());
  p_.kept_stages = first_offloaded_;
  p_.kept_bytes = kept_params_ + kept_state_;
  forward_ns_.assign(stages_.size(), 0);
  backward_ns_.assign(stages_.size(), 0);
  for (const auto b : micro_batches_) base_ += costs_.input_bytes(b);
  stashed_.assign(n_, std::vector<bool>(trace_.layers.size(), false));
  gradient_on_host_.assign(n_, std::vector<bool>(trace_.layers.size(), false));
}

// Each op as it starts: the device's bytes by kind and what the op holds above them.
void L2LStepWalk::emit(OpKind kind, int layer, int s, std::size_t m, std::int64_t duration, std::int64_t input,
                       std::int64_t parameters, std::int64_t gradients, std::int64_t activations, std::int64_t transient) {
  p_.compute_ns += duration;
  p_.stash_copy_ns += bring_ns_;
  (kind == OpKind::ForwardNoGrad ? forward_ns_ : backward_ns_)[static_cast<std::size_t>(s)] += duration + bring_ns_;
  const std::int64_t bytes = input + parameters + gradients + activations + kept_state_ + transient + costs_.workspace_bytes();
  if (ops_ != nullptr) {
    ops_->push_back({kind, layer, s, static_cast<int>(m), duration, input, parameters, gradients, activations, kept_state_, transient});
    ops_->back().copy_in_ns = bring_ns_;
  }
  bring_ns_ = 0;
  if (bytes <= p_.device_peak_bytes) return;
  p_.device_peak_bytes = bytes;
  p_.peak_at = describe_l2l_op(trace_, kind, stages_[static_cast<std::size_t>(s)], s, m);
}

// Sent to the host after the last op, by the stage in forward (kind) or backward: L2L copies
// each boundary tensor on its own.
void L2LStepWalk::send(const std::vector<int>& boundaries, std::int64_t b, int s, bool forward) {
  const std::int64_t bytes = sum_out(boundaries, b);
  const std::int64_t ns = trace_.device.device_to_host_ns(bytes, static_cast<std::int64_t>(boundaries.size()));
  p_.stash_copy_ns += ns;
  p_.stash_copy_bytes += bytes;
  (forward ? forward_ns_ : backward_ns_)[static_cast<std::size_t>(s)] += ns;
  if (ops_ != nullptr && !ops_->empty()) ops_->back().copy_out_ns += ns;
}

// Forward without grad, stage by stage; the next stage's parameters arrive meanwhile.
void L2LStepWalk::forward_pass() {
  for (int s = 0; s <= last_stage_; ++s) {
    const std::int64_t params = on_device(s, s + 1);
    for (std::size_t m = 0; m < n_; ++m) forward_micro_batch(s, params, m);
  }
  p_.host_stash_bytes = boundaries_on_host_ ? host_stash_ : 0;
}

void L2LStepWalk::forward_micro_batch(int s, std::int64_t params, std::size_t m) {
  const auto& stage = stages_[static_cast<std::size_t>(s)];
  // A GPU brings a host stash's inputs back for the stage (held through it); a CPU computes on them there.
  const bool bring_inputs = boundaries_on_host_ && trace_.device.is_cuda();
  const std::int64_t b = micro_batches_[m];
  const std::int64_t brought = bring_inputs ? sum_out(stage.inputs, b) : 0;
  if (brought > 0) {
    bring_ns_ = trace_.device.host_to_device_ns(brought, static_cast<std::int64_t>(stage.inputs.size()));
    p_.stash_copy_bytes += brought;
  }
  std::int64_t live = brought;  // this stage's inputs and outputs still to be read
  for (int i = stage.first; i <= stage.last; ++i) {
    const auto& c = by_batch_.layer(i, b);
    emit(OpKind::ForwardNoGrad, i, s, m, scaled(c.fwd_ns, by_batch_.time_scale(b)), base_, params, 0, stash_ + live,
         c.fwd_transient_bytes);
    live += c.output_bytes;
    for (const int j : trace_.layers[static_cast<std::size_t>(i)].inputs) {
      if (j >= stage.first && graph_.last_reader(j) == i &&
          std::find(stage.exports.begin(), stage.exports.end(), j) == stage.exports.end()) {
        live -= out(j, b);
      }
    }
  }
  for (const int j : stage.exports) stashed_[m][static_cast<std::size_t>(j)] = true;
  (boundaries_on_host_ ? host_stash_ : stash_) += sum_out(stage.exports, b);
  if (boundaries_on_host_) send(stage.exports, b, s, true);
}

// Backward in reverse: each stage re-run with grad from its stashed inputs, then backpropagated;
// the previous stage's parameters arrive meanwhile, and the stage's gradients, there from its
// start, go to the host as it ends.
void L2LStepWalk::backward_pass() {
  host_level_ = host_stash_;
  host_peak_ = host_stash_;
  for (int s = last_stage_; s >= 0; --s) backward_stage(s);
}

void L2LStepWalk::backward_stage(int s) {
  const auto& stage = stages_[static_cast<std::size_t>(s)];
  StageInBackward at{s, stage, 0, 0, {}, host_level_};
  for (const int e : stage.exports) at.export_released_by.emplace_back(e, graph_.output_gradient_released_by(e, stage.first));
  at.params = on_device(s, s - 1);
  // The stage's gradients, zeroed as its backward starts (L2L makes them there, as the
  // profiled step had them before its backward); every micro-batch adds to them in place.
  // On CUDA the previous stage's gradients are still crossing to the host meanwhile (L2L
  // waits for them to land before the stage after this one makes its own): counted throughout.
  at.gradients = stage.parameter_bytes + (trace_.device.is_cuda() && s < last_stage_ ? offloaded(s + 1) : 0);
  for (std::size_t m = 0; m < n_; ++m) backward_micro_batch(at, m);
  // On a GPU the previous stage's host step ran meanwhile (this stage's gradients land once it is
  // done); on a CPU it ran before this stage, on the compute thread.
  host_peak_ = std::max(host_peak_, at.host_high + (trace_.device.is_cuda() ? host_step_ : 0));
  host_step_ = s >= first_offloaded_ && param(s) > 0 ? param(s) + stage_optimizer_transient(costs_, stage) : 0;
  host_peak_ = std::max(host_peak_, host_level_ + host_step_);
  // A kept stage steps on the device once its gradients are complete, then they go; its optimizer
  // is its own, so its temporaries are those of its largest parameter.
  if (s < first_offloaded_) {
    emit(OpKind::Optimizer, stage.last, s, n_ > 0 ? n_ - 1 : 0, transfers_.device_optimizer_ns[static_cast<std::size_t>(s)],
         base_, at.params, at.gradients, stash_ + boundary_grads_, stage_optimizer_transient(costs_, stage));
  }
}

void L2LStepWalk::backward_micro_batch(StageInBackward& at, std::size_t m) {
  const auto& stage = at.stage;
  const std::int64_t b = micro_batches_[m];
  // The constant-memory variant brings the stage's inputs and the gradients at its outputs over.
  const std::int64_t brought = boundaries_on_host_ ? sum_out(stage.inputs, b) + sum_out(stage.exports, b) : 0;
  std::int64_t level = base_ + stash_ + boundary_grads_ + at.params + at.gradients + brought;
  bring_ns_ = boundaries_on_host_ ? trace_.device.host_to_device_ns(
                                        brought, static_cast<std::int64_t>(stage.inputs.size() + stage.exports.size()))
                                  : 0;
  p_.stash_copy_bytes += brought;
  recompute(at, m, level);
  take_output_gradients_from_host(stage, m);
  backpropagate(at, m, level);
  // What stays: the gradients at the stage's inputs (sent to the host in the constant-memory
  // variant); what goes: those at its outputs, and the stashed inputs this stage was the first to read.
  if (!boundaries_on_host_) boundary_grads_ += sum_out(stage.inputs, b) - sum_out(stage.exports, b);
  if (boundaries_on_host_ && !stage.inputs.empty()) send(stage.inputs, b, at.s, false);
  if (boundaries_on_host_) keep_input_gradients_on_host(at, m);
  release_stashed_inputs(at.s, m);
}

// The device's activations while the stage runs: `level` less the inputs, parameters and gradients.
void L2LStepWalk::recompute(const StageInBackward& at, std::size_t m, std::int64_t& level) {
  const auto& stage = at.stage;
  const std::int64_t b = micro_batches_[m];
  for (int i = stage.first; i <= stage.last; ++i) {
    const auto& c = by_batch_.layer(i, b);
    emit(OpKind::Recompute, i, at.s, m, scaled(c.fwd_ns, by_batch_.time_scale(b)), base_, at.params, at.gradients,
         level - base_ - at.params - at.gradients, c.fwd_transient_bytes);
    level += c.fwd_retained_bytes;
    // A stage input's free by its last reader does not happen: the stash holds it.
    for (const int j : trace_.layers[static_cast<std::size_t>(i)].inputs) {
      if (j >= 0 && j < stage.first && graph_.last_reader(j) == i && !graph_.output_saved(j)) level += out(j, b);
    }
  }
}

// The gradients at the stage's outputs seed its backward: the host's copies go.
void L2LStepWalk::take_output_gradients_from_host(const L2LStageCost& stage, std::size_t m) {
  for (const int e : stage.exports) {
    if (!gradient_on_host_[m][static_cast<std::size_t>(e)]) continue;
    gradient_on_host_[m][static_cast<std::size_t>(e)] = false;
    host_level_ -= out(e, micro_batches_[m]);
  }
}

void L2LStepWalk::backpropagate(const StageInBackward& at, std::size_t m, std::int64_t& level) {
  const auto& stage = at.stage;
  const std::int64_t b = micro_batches_[m];
  for (int r = stage.last; r >= stage.first; --r) {
    const auto& c = by_batch_.layer(r, b);
    // A layer reading the stage's inputs: what its backward frees of them in the profiled step
    // (its saved inputs) the stash holds here, so its peak is the one measured with them held.
    // The figure counts whatever earlier layers' tensors it frees, so a layer that also saves one
    // of its stage's own is bounded from above; L2L runs the zoo's models, whose stages'
    // first layers read the stage inputs themselves (no view in between that would free them).
    const auto& reads = trace_.layers[static_cast<std::size_t>(r)].inputs;
    const bool reads_stage_input = std::any_of(reads.begin(), reads.end(), [&](int j) { return j >= 0 && j < stage.first; });
    const std::int64_t held = reads_stage_input ? c.bwd_inputs_held_extra_bytes.value_or(0) : 0;
    emit(OpKind::Backward, r, at.s, m, scaled(c.bwd_ns, by_batch_.time_scale(b)), base_, at.params, at.gradients,
         level - base_ - at.params - at.gradients, c.bwd_transient_bytes + held);
    level += c.bwd_retained_bytes;
    // The gradient arriving at an exported output was let go by this backward in the profiled
    // step; here L2L holds it (it seeded the stage's backward) until the stage is done.
    for (const auto& [e, released_by] : at.export_released_by) {
      if (released_by == r) level += out(e, b);
    }
  }
}

// The constant-memory variant: the gradients at the stage's inputs wait on the host.
void L2LStepWalk::keep_input_gradients_on_host(StageInBackward& at, std::size_t m) {
  const std::int64_t b = micro_batches_[m];
  for (const int j : at.stage.inputs) {
    const bool held = gradient_on_host_[m][static_cast<std::size_t>(j)];
    if (held) {
      // Added to where it waits: in place on a CPU; a GPU adds on the device and sends the sum
      // back, a new host tensor beside the old one for a moment.
      if (trace_.device.is_cuda()) at.host_high = std::max(at.host_high, host_level_ + out(j, b));
    } else {
      gradient_on_host_[m][static_cast<std::size_t>(j)] = true;
      host_level_ += out(j, b);
    }
  }
  at.host_high = std::max(at.host_high, host_level_);
}

void L2LStepWalk::release_stashed_inputs(int s, std::size_t m) {
  for (const int j : stages_[static_cast<std::size_t>(s)].inputs) {
    if (first_reader_stage_[static_cast<std::size_t>(j)] != s || !stashed_[m][static_cast<std::size_t>(j)]) continue;
    stashed_[m][static_cast<std::size_t>(j)] = false;
    (boundaries_on_host_ ? host_level_ : stash_) -= out(j, micro_batches_[m]);
  }
}

// The host's figures, the copies and the three lanes, once both passes have run.
void L2LStepWalk::finish() {
  const std::int64_t offloaded_params = total_params_ - kept_params_;
  for (int s = first_offloaded_; s <= last_stage_; ++s) {
    p_.largest_stage_parameter_bytes = std::max(p_.largest_stage_parameter_bytes, param(s));
  }
  // Also there all step long: every stage's RNG state for every micro-batch (saved as its forward
  // runs, so its recompute draws the same dropout masks) and, on a CPU, what the model holds
  // besides its parameters (built on the host; on a GPU, L2L moves its buffers to the device).
  const std::int64_t rng_states = static_cast<std::int64_t>(stages_.size() * n_) * costs_.checkpoint_state_bytes();
  const std::int64_t model_extra = trace_.device.is_cuda() ? 0 : trace_.model_extra_bytes;
  p_.host_bytes = offloaded_params + (costs_.optimizer_state_bytes() - kept_state_) + rng_states + model_extra + host_peak_;
  // Forward loads every offloaded stage, backward every one but the last (still loaded); gradients go back.
  p_.copy_bytes = 2 * offloaded_params - offloaded(last_stage_) + offloaded_params + p_.stash_copy_bytes;
  p_.host_optimizer_ns = std::accumulate(transfers_.optimizer_ns.begin(), transfers_.optimizer_ns.end(), std::int64_t{0});
  p_.host_shares_compute = !trace_.device.is_cuda();
  const L2LLanes lanes = l2l_lanes(transfers_, stages_, forward_ns_, backward_ns_, p_.host_shares_compute);
  p_.copy_ns = lanes.copy_ns + p_.stash_copy_ns;
  p_.step_ns = std::max<std::int64_t>(lanes.step_ns, 1);
  name_busiest_lane(p_);
}

}  // namespace

L2LPrediction predict_l2l_step(const core::CostModel& costs, const LayerGraph& graph,
                               const std::vector<std::int64_t>& micro_batches, const core::L2LChoice& l2l,
                               std::vector<L2LOp>* ops) {
  return L2LStepWalk(costs, graph, micro_batches, l2l, ops).run();
}

std::string describe_l2l_bound(const L2LPrediction& p) {
  const auto seconds = [](std::int64_t ns) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.4f s", static_cast<double>(ns) / 1e9);
    return std::string(buffer);
  };
  std::string out = p.bound + "-bound";
  if (p.bound_ratio > 0) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, " (%.1fx the next lane)", p.bound_ratio);
    out += ratio;
  }
  out += ": compute " + seconds(p.compute_ns) + ", copies " +
         (p.copy_ns > 0 ? seconds(p.copy_ns) : std::string("not timed (the trace measured no copy bandwidth)")) +
         ", host optimizer " + seconds(p.host_optimizer_ns) +
         (p.host_shares_compute ? " (on the CPU's cores the compute uses: it adds to the step)" : "") + "; step " +
         seconds(p.step_ns);
  return out;
}

StepPrediction l2l_step_prediction(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice) {
  const auto p = predict_l2l_step(costs, graph, choice.micro_batches, choice.l2l.value_or(core::L2LChoice{}));
  return {std::max<std::int64_t>(p.device_peak_bytes, 0), p.step_ns, p.peak_at};
}

namespace {

// The memory changes from one op's device bytes by kind to the next's.
std::vector<core::MemoryChange> memory_changes(const L2LOp& from, const L2LOp& to) {
  using core::MemoryKind;
  std::vector<core::MemoryChange> out;
  const std::pair<MemoryKind, std::int64_t> deltas[] = {
      {MemoryKind::Input, to.input_bytes - from.input_bytes},
      {MemoryKind::Parameter, to.parameter_bytes - from.parameter_bytes},
      {MemoryKind::Gradient, to.gradient_bytes - from.gradient_bytes},
      {MemoryKind::Activation, to.activation_bytes - from.activation_bytes},
      {MemoryKind::OptimizerState, to.optimizer_state_bytes - from.optimizer_state_bytes}};
  for (const auto& [kind, bytes] : deltas) {
    if (bytes != 0) out.push_back({kind, bytes});
  }
  return out;
}

// L2L's step as tasks: its ops on the compute stream, and the copies, gradients going out and
// host optimizer steps ordered as l2l_lanes orders them. The members say where each lane stands.
class L2LScheduleBuilder {
 public:
  L2LScheduleBuilder(const core::CostModel& costs, const L2LPrediction& predicted, const core::L2LChoice& l2l)
      : costs_(costs), predicted_(predicted), layers_(costs.trace().layers), stages_(l2l_stage_costs(costs.trace())) {
    first_offloaded_ = std::max(first_offloaded_stage(stages_, costs.trace(), l2l.from_block), 0);
    transfers_ = stage_transfers(costs, stages_, first_offloaded_);
    last_ = static_cast<int>(stages_.size()) - 1;
  }

  core::Schedule build(const std::vector<L2LOp>& ops, std::int64_t samples) {
    if (costs_.workspace_bytes() > 0) schedule_.resident = {{core::MemoryKind::Workspace, costs_.workspace_bytes()}};
    schedule_.samples = samples;
    schedule_.tasks.reserve(ops.size() + 4 * stages_.size());
    copy_ = copy_in(0, {});
    arrived_.assign(stages_.size(), -1);  // the copy task that brought stage s in, this pass
    arrived_[0] = copy_;
    if (first_offloaded_ > 0 && !ops.empty()) start_with_kept_stages(ops.front());
    for (const L2LOp& op : ops) add_op(op);
    // The step ends with the device empty again.
    if (last_compute_ >= 0) schedule_.tasks[static_cast<std::size_t>(last_compute_)].at_end = memory_changes(before_, L2LOp{});
    if (backward_) finish_backward_stage(current_);
    return std::move(schedule_);
  }

 private:
  int add(core::Task task) {
    schedule_.tasks.push_back(std::move(task));
    return static_cast<int>(schedule_.tasks.size()) - 1;
  }
  std::string stage_name(int s) const {
    const auto& stage = stages_[static_cast<std::size_t>(s)];
    return layers_[static_cast<std::size_t>(stage.first)].name + ".." + layers_[static_cast<std::size_t>(stage.last)].name;
  }
  int copy_in(int s, std::vector<int> deps);
  void start_with_kept_stages(const L2LOp& first);
  void finish_backward_stage(int s);
  std::vector<int> enter_stage(const L2LOp& op);
  void boundary_copy(const L2LOp& op, std::int64_t ns, bool in, std::vector<int> after);
  void add_op(const L2LOp& op);

  const core::CostModel& costs_;
  const L2LPrediction& predicted_;
  const std::vector<core::LayerProfile>& layers_;
  const std::vector<L2LStageCost> stages_;
  int first_offloaded_ = 0;
  StageTransfers transfers_;
  int last_ = -1;
  core::Schedule schedule_;
  int last_compute_ = -1;  // the compute stream's last task
  int copy_ = -1;          // the host-to-device stream's last task
  std::vector<int> arrived_;
  L2LOp before_;           // the device's bytes by kind before the next op
  int current_ = -1;       // the stage running
  bool backward_ = false;  // in the backward pass
};

// A stage's parameters brought in; a kept stage has no copy (-1: no task).
int L2LScheduleBuilder::copy_in(int s, std::vector<int> deps) {
  if (s < first_offloaded_) return -1;
  std::erase(deps, -1);
  core::Task task;
  task.name = "parameters of " + stage_name(s);
  task.category = "prefetch";
  task.stream = core::Stream::HostToDevice;
  task.duration_ns = transfers_.in_ns[static_cast<std::size_t>(s)];
  task.dependencies = std::move(deps);
  return add(std::move(task));
}

// The kept stages' parameters and optimizer state are on the device from the step's start (the
// first stage's compute may wait for the next one's copy).
void L2LScheduleBuilder::start_with_kept_stages(const L2LOp& first) {
  for (int s = 0; s < first_offloaded_; ++s) before_.parameter_bytes += stages_[static_cast<std::size_t>(s)].parameter_bytes;
  before_.optimizer_state_bytes = first.optimizer_state_bytes;
  core::Task kept;
  kept.name = "stages kept on the device";
  kept.category = "kept on the device";
  kept.at_start = memory_changes(L2LOp{}, before_);
  last_compute_ = add(std::move(kept));
}

// A offloaded stage's gradients go out, then the host optimizer steps it; a kept stage has neither.
void L2LScheduleBuilder::finish_backward_stage(int s) {
  if (s < first_offloaded_) return;
  core::Task out;
  out.name = "gradients of " + stage_name(s);
  out.category = "gradient offload";
  out.stream = core::Stream::DeviceToHost;
  out.duration_ns = transfers_.out_ns[static_cast<std::size_t>(s)];
  out.dependencies = {last_compute_};
  const int sent = add(std::move(out));
  if (predicted_.host_shares_compute) last_compute_ = sent;  // sent on the compute thread
  core::Task step;
  step.name = "optimizer." + costs_.trace().optimizer.name + " of " + stage_name(s);
  step.category = "optimizer";
  step.stream = core::Stream::Host;
  step.duration_ns = transfers_.optimizer_ns[static_cast<std::size_t>(s)];
  step.dependencies = {sent};
  const int stepped = add(std::move(step));
  if (predicted_.host_shares_compute) last_compute_ = stepped;  // the compute waits for the cores
}

// What the op's stage waits for to load: when the op starts a stage (or the backward pass), the
// stage's own copy, and the next stage's copy starts.
std::vector<int> L2LScheduleBuilder::enter_stage(const L2LOp& op) {
  const bool op_backward = op.kind != OpKind::ForwardNoGrad;
  std::vector<int> deps;
  if (op.stage == current_ && op_backward == backward_) return deps;
  if (backward_ && op_backward) finish_backward_stage(current_);
  const bool entering_backward = op_backward && !backward_;
  backward_ = op_backward;
  current_ = op.stage;
  if (entering_backward) std::fill(arrived_.begin(), arrived_.end(), -1);
  // Loading: the stage's own copy (none for the last stage in backward: it stayed).
  if (arrived_[static_cast<std::size_t>(current_)] >= 0) deps.push_back(arrived_[static_cast<std::size_t>(current_)]);
  const int next = backward_ ? current_ - 1 : current_ + 1;
  if (next >= 0 && next <= last_) {
    std::vector<int> copy_deps{copy_};
    if (last_compute_ >= 0) copy_deps.push_back(last_compute_);
    copy_ = copy_in(next, std::move(copy_deps));
    arrived_[static_cast<std::size_t>(next)] = copy_;
    if (predicted_.host_shares_compute && copy_ >= 0) deps.push_back(copy_);  // settle_prefetch
  }
  return deps;
}

// The constant-memory variant's boundaries, copied on the compute thread before and after an op;
// on CUDA on the compute stream itself, so they never queue behind the copy streams' work.
void L2LScheduleBuilder::boundary_copy(const L2LOp& op, std::int64_t ns, bool in, std::vector<int> after) {
  core::Task copy_task;
  copy_task.name = "boundaries of " + stage_name(op.stage) + (in ? " in" : " out");
  copy_task.category = "boundary stash";
  copy_task.stream = !predicted_.host_shares_compute ? core::Stream::Compute
                     : in                            ? core::Stream::HostToDevice
                                                     : core::Stream::DeviceToHost;
  copy_task.duration_ns = ns;
  copy_task.micro_batch = op.micro_batch;
  if (last_compute_ >= 0) after.push_back(last_compute_);
  copy_task.dependencies = std::move(after);
  last_compute_ = add(std::move(copy_task));
}

void L2LScheduleBuilder::add_op(const L2LOp& op) {
  std::vector<int> deps = enter_stage(op);
  if (op.copy_in_ns > 0) boundary_copy(op, op.copy_in_ns, true, deps);
  core::Task task;
  task.name = op.kind == OpKind::Optimizer ? "optimizer." + costs_.trace().optimizer.name + " of " + stage_name(op.stage)
                                           : layers_[static_cast<std::size_t>(op.layer)].name;
  task.category = op.kind == OpKind::ForwardNoGrad ? "forward (no grad)" : op_kind_name(op.kind);
  task.duration_ns = op.duration_ns;
  task.transient_bytes = op.transient_bytes;
  task.at_start = memory_changes(before_, op);
  task.layer = op.layer;
  task.micro_batch = op.micro_batch;
  if (last_compute_ >= 0) deps.push_back(last_compute_);
  task.dependencies = std::move(deps);
  last_compute_ = add(std::move(task));
  if (op.copy_out_ns > 0) boundary_copy(op, op.copy_out_ns, false, {});
  before_ = op;
}

}  // namespace

core::Schedule l2l_schedule(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice) {
  std::vector<L2LOp> ops;
  const core::L2LChoice l2l = choice.l2l.value_or(core::L2LChoice{});
  const L2LPrediction predicted = predict_l2l_step(costs, graph, choice.micro_batches, l2l, &ops);
  return L2LScheduleBuilder(costs, predicted, l2l).build(ops, choice.samples());
}

L2LCapacity largest_l2l_model(const core::CostModel& costs, const LayerGraph& graph,
                              const std::vector<std::int64_t>& micro_batches, bool boundaries_on_host,
                              std::int64_t device_limit_bytes, std::int64_t host_memory_bytes) {
  const core::Trace& trace = costs.trace();
  const auto p = predict_l2l_step(costs, graph, micro_batches, core::L2LChoice{boundaries_on_host});
  L2LCapacity c;
  c.device_peak_bytes = p.device_peak_bytes;
  c.fits = p.device_peak_bytes <= device_limit_bytes && (host_memory_bytes <= 0 || p.host_bytes <= host_memory_bytes);
  std::int64_t total_params = 0;
  for (const auto& layer : trace.layers) total_params += layer.param_bytes;
  // Parameter bytes per element: the optimizer's state per element says how many elements there are.
  const auto& optimizer = trace.optimizer;
  if (optimizer.state_bytes > 0 && optimizer.state_bytes_per_param > 0) {
    c.bytes_per_parameter = static_cast<double>(total_params) /
                            (static_cast<double>(optimizer.state_bytes) / optimizer.state_bytes_per_param);
  }
  const auto stages = l2l_stage_costs(trace);
  const L2LStageCost* block = nullptr;
  for (const auto& stage : stages) {
    if (trace.layers[static_cast<std::size_t>(stage.first)].block < 0) continue;
    if (block == nullptr || stage.parameter_bytes > block->parameter_bytes) block = &stage;
  }
  c.parameters = static_cast<double>(total_params) / c.bytes_per_parameter;
  if (!c.fits || block == nullptr) {
    c.bound = !c.fits ? (p.device_peak_bytes > device_limit_bytes ? "device budget" : "host memory") : "the model has no blocks to repeat";
    return c;
  }
  c.block = trace.layers[static_cast<std::size_t>(block->first)].name + ".." + trace.layers[static_cast<std::size_t>(block->last)].name;
  c.block_parameter_bytes = block->parameter_bytes;
  std::int64_t stash = 0;
  for (const auto b : micro_batches) {
    for (const int j : block->exports) stash += costs.layer(static_cast<std::size_t>(j), b).output_bytes;
  }
  c.device_bytes_per_block = boundaries_on_host ? 0 : stash;
  const double state_per_param_byte =
      total_params > 0 ? static_cast<double>(costs.optimizer_state_bytes()) / static_cast<double>(total_params) : 0;
  // A block more keeps its parameters, optimizer state and RNG states on the host; its gradients
  // are there only while it steps, one stage at a time, as a larger stage's already are.
  c.host_bytes_per_block = block->parameter_bytes +
                           std::llround(state_per_param_byte * static_cast<double>(block->parameter_bytes)) +
                           static_cast<std::int64_t>(micro_batches.size()) * costs.checkpoint_state_bytes() +
                           (boundaries_on_host ? stash : 0);
  constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
  const std::int64_t by_device =
      c.device_bytes_per_block > 0 ? (device_limit_bytes - p.device_peak_bytes) / c.device_bytes_per_block : kNone;
  const std::int64_t by_host =
      host_memory_bytes > 0 && c.host_bytes_per_block > 0 ? (host_memory_bytes - p.host_bytes) / c.host_bytes_per_block : kNone;
  c.extra_blocks = std::min(by_device, by_host);
  if (c.extra_blocks == kNone) {
    c.unbounded = true;
    c.extra_blocks = 0;
    return c;
  }
  c.bound = by_device <= by_host ? "device budget" : "host memory";
  c.parameters += static_cast<double>(c.extra_blocks) * static_cast<double>(block->parameter_bytes) / c.bytes_per_parameter;
  return c;
}

std::int64_t least_budget_with_l2l(const core::Trace& trace, const PlanRequest& request, const PlanOutcome& without,
                                   std::int64_t host_memory_bytes) {
  if (without.plan || request.strategies.empty() || request.strategies.contains(Strategy::L2L) || request.workers > 1 ||
      !l2l_can_run(trace)) {
    return 0;
  }
  PlanRequest with_l2l = request;
  with_l2l.strategies.insert(Strategy::L2L);
  with_l2l.host_memory_bytes = host_memory_bytes;
  with_l2l.budget_bytes = 1;  // fits nothing: the outcome names the least that does
  const std::int64_t least = plan_step(trace, with_l2l).smallest_budget;
  const bool less = least > 0 && (without.smallest_budget == 0 || least < without.smallest_budget);
  return less ? least : 0;
}

namespace {

// L2L as a technique: an L2L step runs stage by stage, so it is predicted and scheduled here rather
// than as the micro-batch sequence; a plan may ask it of a model L2L can run, as one worker,
// with standard layers and nothing checkpointed.
class L2L final : public Technique {
 public:
  std::optional<Strategy> strategy() const override { return Strategy::L2L; }
  bool used_by(const core::StepChoice& choice) const override { return choice.l2l.has_value(); }
  bool runs_the_step(const core::StepChoice& choice) const override { return used_by(choice); }
  void open(SearchSpace& space, const core::Trace& trace, const LayerGraph&, const PlanRequest& request) const override {
    if (!request.strategies.contains(Strategy::L2L)) return;
    // Named by itself it must apply (the CLI says so first); with others it applies where it can.
    if (request.workers > 1) {
      throw core::InputError("strategies: l2l with data parallel (" + std::to_string(request.workers) +
                             " workers) is not implemented; plan L2L on one device");
    }
    if (request.host_memory_bytes < 0) throw core::InputError("host_memory_bytes: expected zero (not checked) or more");
    space.l2l = l2l_can_run(trace);
    space.host_memory = request.host_memory_bytes;
  }
  void summarize(const core::StepChoice& choice, std::vector<SummaryLine>& lines) const override {
    if (!used_by(choice)) return;
    const core::L2LChoice& l2l = *choice.l2l;
    lines.push_back({"l2l", (l2l.whole_model() ? std::string("the whole model")
                                               : "from block " + std::to_string(l2l.from_block) +
                                                     " on (the layers before it kept on the device)") +
                                ", boundaries on the " + (l2l.boundaries_on_host ? "host" : "device")});
  }
  StepPrediction predict(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice) const override {
    return l2l_step_prediction(costs, graph, choice);
  }
  core::Schedule schedule(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice) const override {
    return l2l_schedule(costs, graph, choice);
  }
  void explain(const ChosenStep& step, std::vector<std::string>& warnings) const override {
    if (!used_by(step.choice)) return;
    warnings.push_back(l2l_note(predict_l2l_step(step.costs, step.graph, step.choice.micro_batches, *step.choice.l2l), *step.choice.l2l));
  }
  void predict_parts(const ChosenStep& step, std::map<std::string, double>& parts) const override {
    const L2LPrediction p = predict_l2l_step(step.costs, step.graph, step.choice.micro_batches, *step.choice.l2l);
    // The compute thread waits for what it does not do itself: on a CPU (copies and the host step
    // on its cores) nothing beyond them; on CUDA whatever of the step is not its compute.
    const std::int64_t own = p.compute_ns + (p.host_shares_compute ? p.copy_ns + p.host_optimizer_ns : 0);
    const auto seconds = [](std::int64_t ns) { return static_cast<double>(ns) * 1e-9; };
    parts[std::string(core::kL2LComputeSecondsPart)] = seconds(p.compute_ns);
    parts[std::string(core::kL2LCopySecondsPart)] = seconds(p.copy_ns);
    parts[std::string(core::kL2LWaitSecondsPart)] = seconds(std::max<std::int64_t>(p.step_ns - own, 0));
    parts[std::string(core::kL2LHostOptimizerSecondsPart)] = seconds(p.host_optimizer_ns);
    parts[std::string(core::kL2LHostBytesPart)] = static_cast<double>(p.host_bytes);
  }
  // The largest model the budget trains with L2L, both variants: at the plan's micro-batches
  // when it uses L2L, else at the finest split the strategies allow (the least device peak).
  std::string after_summary(const core::Trace& trace, const core::Plan& plan, const PlanRequest& request,
                            bool named) const override {
    if (!used_by(plan.choice) && !named) return {};
    const core::CostModel costs(trace);
    const LayerGraph graph(trace);
    const bool micro_batching = request.strategies.contains(Strategy::MicroBatching);
    const auto micro = used_by(plan.choice)
                           ? plan.choice.micro_batches
                           : split_batch(request.global_batch,
                                         micro_batching ? std::min<std::int64_t>(request.global_batch, kMaxL2LMicroBatches) : 1);
    const std::int64_t limit = plan.budget_bytes - plan.margin_bytes;
    std::string out = "\nlargest model L2L trains under " + core::format_bytes(plan.budget_bytes) +
                      " (estimate: this model with its largest block repeated; L2L's device memory grows with depth only "
                      "by the stashed block boundaries, its host memory by each block's parameters, optimizer state and "
                      "RNG states; a block's gradients are on the host only while it steps):\n";
    for (const bool on_host : {false, true}) {
      const auto capacity = largest_l2l_model(costs, graph, micro, on_host, limit, request.host_memory_bytes);
      out += "  " + l2l_capacity_line(capacity, on_host, micro, request.host_memory_bytes) + "\n";
    }
    return out;
  }
  void check(const CheckedChoice& c) const override {
    if (!used_by(c.choice)) return;
    const core::Trace& trace = c.trace;
    const core::StepChoice& choice = c.choice;
    const std::string& source = c.source;
    if (const std::string why = l2l_refusal(trace); !why.empty()) {
      throw core::InputError(source + ": $.l2l: L2L cannot run " + trace.model.name + ": " + why);
    }
    if (choice.data_parallel) {
      throw core::InputError(source + ": $.l2l: L2L with data parallel (world_size " + std::to_string(choice.workers()) +
                             ") is not implemented");
    }
    if (!choice.checkpointed_blocks.empty()) {
      throw core::InputError(source + ": $.l2l: L2L recomputes every block already; give no checkpointed_blocks");
    }
    for (const auto& layer : choice.layers) {
      if (layer.variant != core::LayerVariant::Standard) {
        throw core::InputError(source + ": $.layers[" + std::to_string(layer.id) + "].variant: L2L runs standard layers only");
      }
    }
    const auto stages = l2l_stage_costs(trace);
    if (!choice.l2l->whole_model() && first_offloaded_stage(stages, trace, choice.l2l->from_block) < 0) {
      std::string blocks;
      for (const auto& stage : stages) {
        const int block = trace.layers[static_cast<std::size_t>(stage.first)].block;
        if (block >= 0) blocks += (blocks.empty() ? "" : ", ") + std::to_string(block);
      }
      throw core::InputError(source + ": $.l2l.from_block: " + trace.model.name + " has no block " +
                             std::to_string(choice.l2l->from_block) + " (its blocks: " + (blocks.empty() ? "none" : blocks) + ")");
    }
    if (choice.micro_batches.size() > kMaxL2LMicroBatches) {
      throw core::InputError(source + ": $.micro_batches: an L2L step takes at most " + std::to_string(kMaxL2LMicroBatches) +
                             " micro-batches, got " + std::to_string(choice.micro_batches.size()));
    }
  }
};

}  // namespace

const Technique& l2l_technique() {
  static const L2L technique;
  return technique;
}

}  // namespace headroom::planner
