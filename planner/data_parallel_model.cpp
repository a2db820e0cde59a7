#include "planner/data_parallel_model.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <string>

#include "core/errors.h"
#include "core/sharding.h"
#include "core/units.h"
#include "planner/plan_search.h"
#include "planner/technique.h"

namespace headroom::planner {

std::vector<core::GradientBucket> plan_buckets(const core::CostModel& costs, const core::StepChoice& choice) {
  std::vector<std::int64_t> bytes;
  bytes.reserve(costs.layer_count());
  // A layer's gradient is as large as its parameters; its bucket's, wider under bf16 over Gloo.
  const core::Trace& trace = costs.trace();
  for (const auto& layer : trace.layers) {
    bytes.push_back(core::allreduce_gradient_bytes(layer.trainable_param_bytes(), trace.precision, trace.device.is_cuda()));
  }
  return core::gradient_buckets(bytes, choice.data_parallel ? choice.data_parallel->bucket_cap_bytes : core::kDefaultBucketCapBytes);
}

std::int64_t bucket_buffer_bytes(const core::CostModel& costs, const core::StepChoice& choice) {
  // Stage 2 reduces each gradient to its owner from where backward made it: no buckets.
  if (!choice.data_parallel || choice.data_parallel->shard_stage >= 2) return 0;
  std::int64_t total = 0;
  for (const auto& b : plan_buckets(costs, choice)) total += b.bytes;
  return total;
}

// The executor's copies between the gradients and the collectives' buffers (executor/data_parallel.cpp),
// on the compute thread: `passes` times a copy of `bytes`. On the CPU, memory copies at the trace's
// measured tensor-copy bandwidth (bandwidth alone: each copies a whole gradient, where a copy's fixed
// cost of microseconds is below what a step resolves). On a GPU, device-memory copies, too fast beside
// its step to count; a trace that measured no copy bandwidth times none.
std::int64_t gradient_copy_ns(const core::CostModel& costs, std::int64_t bytes, double passes) {
  const core::DeviceInfo& device = costs.trace().device;
  if (device.is_cuda() || device.host_to_device_bytes_per_s <= 0 || bytes <= 0) return 0;
  return core::transfer_ns(std::llround(passes * static_cast<double>(bytes)), device.host_to_device_bytes_per_s, 0, 0);
}

AllReduceTiming allreduce_timing(const core::CostModel& costs, const std::vector<Op>& last_ops, const core::StepChoice& choice) {
  AllReduceTiming timing;
  if (!choice.data_parallel || choice.data_parallel->shard_stage >= 2) return timing;
  // When each op of the last micro-batch ends, and which op ends each layer's backward.
  std::vector<std::int64_t> end_of(last_ops.size(), 0);
  std::vector<std::size_t> backward_op(costs.layer_count(), last_ops.size());
  std::int64_t clock = 0;
  for (std::size_t k = 0; k < last_ops.size(); ++k) {
    clock += last_ops[k].duration_ns;
    end_of[k] = clock;
    if (last_ops[k].kind == OpKind::Backward && last_ops[k].layer >= 0) {
      backward_op[static_cast<std::size_t>(last_ops[k].layer)] = k;
    }
  }
  std::int64_t collective_free = 0;
  for (const auto& bucket : plan_buckets(costs, choice)) {
    BucketAllReduce b;
    b.ready_after_op = std::min(backward_op[static_cast<std::size_t>(bucket.first_layer)], last_ops.size() - 1);
    b.bytes = bucket.bytes;
    b.duration_ns = core::ring_allreduce_ns(bucket.bytes, choice.workers(), choice.data_parallel->link);
    b.copy_ns = gradient_copy_ns(costs, bucket.bytes, 1);
    b.start_ns = std::max(end_of[b.ready_after_op], collective_free);
    b.end_ns = b.start_ns + b.duration_ns;
    collective_free = b.end_ns;
    timing.total_ns += b.duration_ns;
    timing.buckets.push_back(b);
  }
  // The buckets are all ready once the last backward ends, so the link is busy from there to the
  // last one's end: the rest of their time ran beside the backward.
  const std::int64_t past_compute = std::max<std::int64_t>(0, collective_free - clock);
  timing.beside_ns = std::llround(static_cast<double>(timing.total_ns - past_compute) * choice.data_parallel->link.beside_compute);
  timing.link_past_compute_ns = past_compute;
  // The last backward copies each gradient into its bucket as it is made (the compute's time, after
  // its ops here), and once a bucket's all-reduce is done the worker copies the sum back into the
  // gradients, bucket by bucket: the copies back are in what it waits for.
  for (const auto& b : timing.buckets) timing.copy_in_ns += b.copy_ns;
  const std::int64_t compute_end = clock + timing.copy_in_ns;
  std::int64_t copied_back = compute_end;
  for (const auto& b : timing.buckets) copied_back = std::max(copied_back, b.end_ns) + b.copy_ns;
  timing.exposed_ns = copied_back - compute_end;
  return timing;
}

int append_allreduce_tasks(const core::CostModel& costs, const std::vector<Op>& last_ops, const core::StepChoice& choice,
                           const std::vector<int>& task_of_op, core::Schedule& schedule) {
  const AllReduceTiming timing = allreduce_timing(costs, last_ops, choice);
  const auto push = [&](core::Task task) {
    schedule.tasks.push_back(std::move(task));
    return static_cast<int>(schedule.tasks.size()) - 1;
  };
  // On the compute thread after the last backward: the gradients' copies into their buckets.
  int compute = !task_of_op.empty() ? task_of_op.back() : -1;
  if (timing.copy_in_ns > 0) {
    core::Task copy;
    copy.name = "gradients copied into their buckets";
    copy.category = "gradient copies";
    copy.duration_ns = timing.copy_in_ns;
    if (compute >= 0) copy.dependencies.push_back(compute);
    compute = push(std::move(copy));
  }
  int previous = -1;
  std::vector<int> reduced;
  for (std::size_t k = 0; k < timing.buckets.size(); ++k) {
    const BucketAllReduce& b = timing.buckets[k];
    core::Task task;
    task.name = "all-reduce bucket " + std::to_string(k) + " (" + core::format_bytes(b.bytes) + ")";
    task.category = "all-reduce";
    task.stream = core::Stream::Collective;
    task.duration_ns = b.duration_ns;
    const int ready = b.ready_after_op < task_of_op.size() ? task_of_op[b.ready_after_op] : -1;
    if (ready >= 0) task.dependencies.push_back(ready);
    if (previous >= 0) task.dependencies.push_back(previous);
    previous = push(std::move(task));
    reduced.push_back(previous);
  }
  // Each bucket's sum copied back into the gradients once its all-reduce is done, in turn.
  for (std::size_t k = 0; k < timing.buckets.size(); ++k) {
    const std::int64_t ns = timing.buckets[k].copy_ns;
    if (ns <= 0) continue;
    core::Task copy;
    copy.name = "bucket " + std::to_string(k) + " copied back";
    copy.category = "gradient copies";
    copy.duration_ns = ns;
    copy.dependencies = {reduced[k]};
    if (compute >= 0) copy.dependencies.push_back(compute);
    previous = compute = push(std::move(copy));
  }
  if (timing.beside_ns > 0) {
    // What the backward lost to the buckets beside it, on the compute thread once the last has ended.
    core::Task slowed;
    slowed.name = "compute slowed by the all-reduces beside it";
    slowed.category = std::string(kBesideComputeCategory);
    slowed.duration_ns = timing.beside_ns;
    slowed.dependencies = {previous};
    if (compute >= 0) slowed.dependencies.push_back(compute);
    previous = push(std::move(slowed));
  }
  return previous;
}

namespace {

int shard_stage(const core::StepChoice& choice) { return choice.data_parallel ? choice.data_parallel->shard_stage : 0; }

// The trainable parameters' elements: sharding runs in fp32 (plan_search checks), 4 bytes each.
std::int64_t trainable_elements(const core::CostModel& costs) { return costs.gradient_bytes() / 4; }

// The trainable elements worker 0 owns (the most any worker owns).
std::int64_t worker_zero_elements(const core::CostModel& costs, const core::StepChoice& choice) {
  return core::owned_elements(trainable_elements(costs), choice.workers(), 0).size();
}

// Worker 0's share of the trainable elements.
double owned_share(const core::CostModel& costs, const core::StepChoice& choice) {
  const std::int64_t elements = trainable_elements(costs);
  if (shard_stage(choice) == 0 || elements == 0) return 1.0;
  return static_cast<double>(worker_zero_elements(costs, choice)) / static_cast<double>(elements);
}

std::int64_t scaled(std::int64_t value, double share) { return std::llround(static_cast<double>(value) * share); }

}  // namespace

std::int64_t worker_optimizer_state_bytes(const core::CostModel& costs, const core::StepChoice& choice) {
  return scaled(costs.optimizer_state_bytes(), owned_share(costs, choice));
}

std::int64_t worker_gradient_bytes(const core::CostModel& costs, const core::StepChoice& choice) {
  if (shard_stage(choice) < 2) return costs.gradient_bytes();
  // Its range's, and the two buffers gradients are reduced from.
  return 4 * (worker_zero_elements(costs, choice) + 2 * core::reduce_buffer_elements(costs.trace().optimizer.largest_param_elements));
}

std::int64_t worker_parameter_bytes(const core::CostModel& costs, const core::StepChoice& choice) {
  if (shard_stage(choice) < 3) return costs.param_bytes();
  return costs.param_bytes() - costs.gradient_bytes() + 4 * worker_zero_elements(costs, choice);
}

std::int64_t worker_static_bytes(const core::CostModel& costs, const core::StepChoice& choice) {
  return costs.static_bytes() - costs.optimizer_state_bytes() - costs.gradient_bytes() - costs.param_bytes() +
         worker_parameter_bytes(costs, choice) + worker_optimizer_state_bytes(costs, choice) +
         worker_gradient_bytes(costs, choice) + bucket_buffer_bytes(costs, choice);
}

ParameterUnits parameter_gathers(const LayerGraph& graph, const core::StepChoice& choice) {
  if (shard_stage(choice) < 3) return {};
  ParameterUnits gathers{graph.parameter_units(choice.data_parallel->gather), {}};
  const auto& unit_of = gathers.unit_of_layer;
  std::vector<ParameterGather>& out = gathers.units;
  out.resize(unit_of.empty() ? 0 : static_cast<std::size_t>(unit_of.back()) + 1);
  for (int layer = 0; layer < static_cast<int>(graph.size()); ++layer) {
    if (graph.trainable_bytes(layer) == 0) continue;
    ParameterGather& unit = out[static_cast<std::size_t>(unit_of[static_cast<std::size_t>(layer)])];
    if (unit.first_layer < 0) {
      unit.first_layer = layer;
      unit.for_backward = false;
    }
    unit.last_layer = layer;
    unit.bytes += graph.trainable_bytes(layer);
    unit.for_backward = unit.for_backward || graph.backward_reads_parameters(layer);
  }
  const std::int64_t elements = graph.trainable_bytes() / 4;
  for (ParameterGather& unit : out) {
    if (unit.bytes == 0) continue;
    const std::int64_t first = graph.trainable_bytes_before(unit.first_layer) / 4;
    unit.ns = core::gather_ns({first, first + unit.bytes / 4}, elements, choice.workers(), choice.data_parallel->link);
  }
  return gathers;
}

namespace {

// Each gather but a micro-batch's first starts as the gathering op before it starts (the executor
// prefetches one ahead), unless it is the same unit's (a layer's backward right after its forward),
// whose memory is in use: its memory is held from there.
void add_prefetches(std::vector<Op>& ops, const std::vector<int>& unit_of_layer) {
  const auto unit = [&](const Op& op) { return unit_of_layer[static_cast<std::size_t>(op.layer)]; };
  std::size_t previous = ops.size();
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].gathered_bytes == 0) continue;
    if (previous < ops.size() && unit(ops[previous]) != unit(ops[k])) {
      ops[k].gather_prefetched = true;
      ops[previous].prefetch_ahead = static_cast<int>(k - previous);
      for (std::size_t j = previous; j < k; ++j) {
        ops[j].prefetched_bytes = ops[k].gathered_bytes;
        ops[j].transient_bytes += ops[k].gathered_bytes;
      }
    }
    previous = k;
  }
}

}  // namespace

void add_parameter_gathers(std::vector<Op>& ops, const LayerGraph& graph, const ParameterUnits& gathers) {
  if (gathers.empty()) return;
  std::vector<bool> held(gathers.units.size(), false);
  for (Op& op : ops) {
    const bool forward = op.kind == OpKind::Forward || op.kind == OpKind::ForwardNoGrad || op.kind == OpKind::Recompute;
    if (op.layer < 0 || graph.trainable_bytes(op.layer) == 0 || (!forward && op.kind != OpKind::Backward)) continue;
    const auto unit = static_cast<std::size_t>(gathers.unit_of_layer[static_cast<std::size_t>(op.layer)]);
    const ParameterGather& gather = gathers.units[unit];
    const bool gathers_here = !held[unit] && (forward || gather.for_backward);
    if (gathers_here) {
      op.gather_ns = gather.ns;
      op.transient_bytes += gather.bytes;
      op.gathered_bytes = gather.bytes;
      held[unit] = true;
    }
    // A recompute keeps them for the backward after it.
    const bool lets_go = held[unit] && ((op.kind != OpKind::Recompute && forward && op.layer == gather.last_layer) ||
                                        (op.kind == OpKind::Backward && op.layer == gather.first_layer));
    if (gathers_here == lets_go) {
      held[unit] = held[unit] && !lets_go;
      continue;
    }
    // Held past the op that gathers them, or let go of by a later one.
    const std::int64_t kept = gathers_here ? gather.bytes : -gather.bytes;
    op.retained_bytes += kept;
    op.kept_gathered_bytes = kept;
    held[unit] = !lets_go;
  }
  add_prefetches(ops, gathers.unit_of_layer);
}

std::int64_t parameter_gather_step_ns(const StepSequence& seq) {
  std::int64_t total = 0;
  for (const auto& segment : seq.segments) {
    for (const Op& op : seq.ops[segment.ops]) total += op.gather_ns * segment.repeat;
  }
  return total;
}

// Stage 2-3, per layer: `cost(buffer, elements)` of each reduce buffer placed there. Backward makes
// the gradients from the last layer's to the first's, and a worker packs them into a buffer in that
// order: buffer s holds elements [E - (s+1)·slot, E - s·slot) of the flat order, reduced once the
// layer holding its first element has made its gradients.
template <typename BufferCost>
std::vector<std::int64_t> per_reduce_buffer(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice,
                                            BufferCost cost) {
  if (shard_stage(choice) < 2) return {};
  std::vector<std::int64_t> out(graph.size(), 0);
  const std::int64_t elements = trainable_elements(costs);
  const std::int64_t slot = core::reduce_buffer_elements(costs.trace().optimizer.largest_param_elements);
  if (elements == 0 || slot <= 0) return out;
  for (std::int64_t end = elements; end > 0; end -= slot) {
    const core::ElementRange packed{std::max<std::int64_t>(0, end - slot), end};
    out[static_cast<std::size_t>(graph.layer_holding_trainable_byte(4 * packed.begin))] += cost(packed, elements);
  }
  return out;
}

namespace {

// The workers whose ranges of the flat order `packed` holds elements of: a buffer's collectives.
std::int64_t owners_spanned(core::ElementRange packed, std::int64_t elements, int workers) {
  std::int64_t owners = 0;
  for (int r = 0; r < workers; ++r) owners += core::overlap(packed, core::owned_elements(elements, workers, r)).size() > 0;
  return owners;
}

}  // namespace

std::vector<std::int64_t> gradient_reduce_ns(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice) {
  return per_reduce_buffer(costs, graph, choice, [&](core::ElementRange packed, std::int64_t elements) {
    return core::reduce_ns(4 * packed.size(), owners_spanned(packed, elements, choice.workers()), choice.workers(),
                           choice.data_parallel->link);
  });
}

std::int64_t gradient_reduce_collectives(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice) {
  const auto owners = [&](core::ElementRange packed, std::int64_t elements) { return owners_spanned(packed, elements, choice.workers()); };
  const std::vector<std::int64_t> per_layer = per_reduce_buffer(costs, graph, choice, owners);
  return std::accumulate(per_layer.begin(), per_layer.end(), std::int64_t{0});
}

std::vector<std::int64_t> gradient_reduce_copy_ns(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice) {
  // Once a buffer's reduces are done, the parts the worker owns are added into its range's gradients ...
  std::vector<std::int64_t> out = per_reduce_buffer(costs, graph, choice, [&](core::ElementRange packed, std::int64_t elements) {
    return gradient_copy_ns(costs, 4 * core::overlap(packed, core::owned_elements(elements, choice.workers(), 0)).size(), 1.5);
  });
  // ... and each gradient is packed into a buffer as its backward makes it.
  for (std::size_t l = 0; l < out.size(); ++l) out[l] += gradient_copy_ns(costs, graph.trainable_bytes(static_cast<int>(l)), 1);
  return out;
}

bool add_gradient_reduces(std::vector<Op>& ops, const std::vector<std::int64_t>& reduce_ns, const std::vector<std::int64_t>& copy_ns) {
  if (reduce_ns.empty()) return false;
  bool any = false;
  for (Op& op : ops) {
    if (op.kind != OpKind::Backward || op.layer < 0) continue;
    op.reduce_ns = reduce_ns[static_cast<std::size_t>(op.layer)];
    op.reduce_copy_ns = copy_ns.empty() ? 0 : copy_ns[static_cast<std::size_t>(op.layer)];
    any = any || op.reduce_ns > 0;
  }
  return any;
}

CollectiveWaits collective_waits(const std::vector<Op>& ops, double beside_compute) {
  CollectiveWaits waits;
  std::int64_t busy = 0;  // the collectives' time in all
  std::int64_t copies = 0;  // the worker's copies for the reduces
  for (const Op& op : ops) busy += op.gather_ns + op.reduce_ns;
  std::int64_t clock = 0, link_free = 0;
  std::array<std::int64_t, 2> buffer_free{0, 0};  // when each buffer's last reduce ends
  std::size_t next = 0;
  std::int64_t prefetch_done = 0;  // when the gather started one ahead ends
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const Op& op = ops[k];
    if (op.kind == OpKind::CollectiveWait) continue;
    if (op.gathered_bytes > 0) {
      if (!op.gather_prefetched) link_free = std::max(clock, link_free) + op.gather_ns;
      const std::int64_t done = op.gather_prefetched ? prefetch_done : link_free;
      waits.gather_ns += std::max<std::int64_t>(0, done - clock);
      clock = std::max(clock, done);
      // The next gather starts as this op does, on the link after what is queued.
      if (op.prefetch_ahead > 0) {
        prefetch_done = link_free = std::max(clock, link_free) + ops[k + static_cast<std::size_t>(op.prefetch_ahead)].gather_ns;
      }
    }
    clock += op.duration_ns + op.reduce_copy_ns;
    copies += op.reduce_copy_ns;
    if (op.reduce_ns == 0) continue;
    // The filled buffer's reduces start; backward fills the other one once the reduces from it are done.
    link_free = std::max(clock, link_free) + op.reduce_ns;
    buffer_free[next] = link_free;
    next = (next + 1) % buffer_free.size();
    waits.reduce_ns += std::max(clock, buffer_free[next]) - clock;
    clock = std::max(clock, buffer_free[next]);
  }
  waits.reduce_ns += std::max(clock, link_free) - clock;
  // The link is busy whenever the compute waits for it, so what of its time the compute did not
  // wait for ran beside the compute.
  const std::int64_t beside = std::max<std::int64_t>(0, busy - waits.gather_ns - waits.reduce_ns);
  waits.beside_ns = std::llround(static_cast<double>(beside) * beside_compute);
  // The copies are the compute's own time, and what the executor measures of the reduces.
  waits.reduce_ns += copies;
  return waits;
}

std::int64_t collectives_past_compute_ns(const std::vector<Op>& ops, double beside_compute) {
  const CollectiveWaits waits = collective_waits(ops, beside_compute);
  return waits.gather_ns + waits.reduce_ns + waits.beside_ns;
}

CollectiveWaits step_collective_waits(const StepSequence& seq, double beside_compute) {
  CollectiveWaits total;
  for (const auto& segment : seq.segments) {
    const CollectiveWaits waits = collective_waits(seq.ops[segment.ops], beside_compute);
    total.gather_ns += waits.gather_ns * segment.repeat;
    total.reduce_ns += waits.reduce_ns * segment.repeat;
    total.beside_ns += waits.beside_ns * segment.repeat;
  }
  return total;
}

std::int64_t gradient_reduce_step_ns(const core::CostModel& costs, const LayerGraph& graph, const core::StepChoice& choice) {
  std::int64_t per_micro_batch = 0;
  for (const std::int64_t ns : gradient_reduce_ns(costs, graph, choice)) per_micro_batch += ns;
  return per_micro_batch * static_cast<std::int64_t>(choice.worker_micro_batches(0).size());
}

std::int64_t parameter_broadcast_ns(const core::CostModel& costs, const core::StepChoice& choice) {
  // At stage 3 each unit's parameters are gathered where they are used: nothing follows the optimizer.
  if (shard_stage(choice) == 0 || shard_stage(choice) >= 3) return 0;
  const std::int64_t elements = trainable_elements(costs);
  std::int64_t total = 0;
  for (int r = 0; r < choice.workers(); ++r) {
    total += core::broadcast_ns(4 * core::owned_elements(elements, choice.workers(), r).size(), choice.workers(),
                                choice.data_parallel->link);
  }
  return total;
}

std::int64_t worker_optimizer_ns(const core::CostModel& costs, const core::StepChoice& choice) {
  return scaled(costs.optimizer_ns(), owned_share(costs, choice)) + parameter_broadcast_ns(costs, choice);
}

std::int64_t worker_optimizer_transient_bytes(const core::CostModel& costs, const core::StepChoice& choice) {
  const std::int64_t whole = costs.optimizer_transient_bytes();
  const std::int64_t largest = costs.trace().optimizer.largest_param_elements;
  if (shard_stage(choice) == 0 || largest == 0) return whole;
  // Temporaries scale with the tensor stepped: the largest piece of worker 0's range.
  const std::int64_t owned = worker_zero_elements(costs, choice);
  const std::int64_t piece = std::min({core::kShardedOptimizerPieceElements, owned, largest});
  return std::min(whole, scaled(whole, static_cast<double>(piece) / static_cast<double>(largest)));
}

std::vector<std::int64_t> worker_shares(std::int64_t global_batch, int workers) {
  std::vector<std::int64_t> shares(static_cast<std::size_t>(workers), global_batch / workers);
  for (std::int64_t r = 0; r < global_batch % workers; ++r) ++shares[static_cast<std::size_t>(r)];
  return shares;
}

namespace {

// Stage 3's unit in the plan's explanation.
std::string gathered_unit(core::GatherUnit unit) {
  return unit == core::GatherUnit::Block ? "each block's (each layer's outside blocks)" : "each layer's";
}

// Data parallel as a technique: asked for by the request's workers rather than by --strategies; the
// step sequence adds the all-reduce (above). A plan predicts its worker 0, so no other may carry more.
class DataParallel final : public Technique {
 public:
  bool used_by(const core::StepChoice& choice) const override { return choice.data_parallel.has_value(); }
  void open(SearchSpace& space, const core::Trace&, const LayerGraph&, const PlanRequest& request) const override {
    if (request.workers > 1) {
      space.base.data_parallel = core::DataParallelChoice{request.workers, {}, request.link, request.bucket_cap_bytes,
                                                          request.shard_stage.value_or(0),
                                                          request.gather.value_or(core::GatherUnit::Block)};
    }
  }
  void summarize(const core::StepChoice& c, std::vector<SummaryLine>& lines) const override {
    if (!used_by(c)) return;
    const core::DataParallelChoice& dp = *c.data_parallel;
    // Workers whose micro-batches are alike, run by run: "workers 0-1 16 samples as 3 x 6..5".
    std::string text = std::to_string(dp.workers) + " workers:";
    int from = 0;
    for (int r = 1; r <= dp.workers; ++r) {
      if (r < dp.workers && c.worker_micro_batches(r) == c.worker_micro_batches(from)) continue;
      const auto sizes = c.worker_micro_batches(from);
      const std::int64_t samples = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
      text += std::string(from > 0 ? ";" : "") +
              (r - 1 > from ? " workers " + std::to_string(from) + "-" + std::to_string(r - 1) : " worker " + std::to_string(from)) +
              " " + std::to_string(samples) + " samples as " + std::to_string(sizes.size()) + " x " + std::to_string(sizes.front()) +
              (sizes.back() != sizes.front() ? ".." + std::to_string(sizes.back()) : "");
      from = r;
    }
    text += "\n                   " +
            (dp.shard_stage >= 2 ? std::string("gradients reduced to their owners")
                                 : "gradients all-reduced in buckets of " + core::format_bytes(dp.bucket_cap_bytes) + " over a ring") +
            ", link " + core::format_link(dp.link) + " (" + dp.link.source + ")" +
            (dp.link.beside_compute > 0 ? "; the compute loses " + std::to_string(std::lround(dp.link.beside_compute * 100)) +
                                              "% of a collective's time beside it"
                                        : std::string());
    lines.push_back({"data parallel", text});
    if (dp.shard_stage > 0) {
      const std::string share = "1/" + std::to_string(dp.workers) + " of the parameters";
      const std::string indent = "\n                   ";
      const std::string kept = dp.shard_stage >= 3   ? "the optimizer state, gradients and values"
                               : dp.shard_stage >= 2 ? "the optimizer state and gradients"
                                                     : "the optimizer state";
      const std::string how =
          dp.shard_stage >= 3 ? "(the gradients reduced to their owners as backward fills a buffer) and steps them; " + gathered_unit(dp.gather) +
                                " parameters are gathered" + indent + "from their owners before its forward and its backward (or recompute)"
                                " and let go of after, each started as the one" + indent + "before takes its own (prefetched one ahead)"
          : dp.shard_stage >= 2 ? "(the gradients reduced to their owners as backward fills a buffer), steps them and broadcasts them to"
                                  " the others"
                                : "steps them and broadcasts them to the others";
      lines.push_back({"sharded", core::shard_stage_name(dp.shard_stage) + ": each worker keeps " + kept + " of " + share +
                                      indent + how});
    }
  }
  std::int64_t after_last_micro_batch_ns(const core::CostModel& costs, const std::vector<Op>& last_ops,
                                         const core::StepChoice& choice) const override {
    if (!used_by(choice)) return 0;
    const AllReduceTiming timing = allreduce_timing(costs, last_ops, choice);
    return timing.copy_in_ns + timing.exposed_ns + timing.beside_ns;
  }
  int append_after_last_micro_batch(const core::CostModel& costs, const std::vector<Op>& last_ops, const core::StepChoice& choice,
                                    const std::vector<int>& task_of_op, core::Schedule& schedule) const override {
    return used_by(choice) ? append_allreduce_tasks(costs, last_ops, choice, task_of_op, schedule) : -1;
  }
  void predict_parts(const ChosenStep& step, std::map<std::string, double>& parts) const override {
    const StepSequence seq = step_sequence(step.costs, step.graph, step.choice);
    for (const auto& segment : seq.segments) {
      if (!segment.keeps_input) continue;
      const AllReduceTiming timing = allreduce_timing(step.costs, seq.ops[segment.ops], step.choice);
      parts[std::string(core::kAllReduceSecondsPart)] = static_cast<double>(timing.total_ns) * 1e-9;
      parts[std::string(core::kExposedAllReduceSecondsPart)] = static_cast<double>(timing.exposed_ns) * 1e-9;
      const double beside_compute = step.choice.data_parallel->link.beside_compute;
      const CollectiveWaits waits = step_collective_waits(seq, beside_compute);
      if (beside_compute > 0) {
        parts[std::string(core::kComputeBesideCollectivesSecondsPart)] = static_cast<double>(timing.beside_ns + waits.beside_ns) * 1e-9;
      }
      if (step.choice.data_parallel->shard_stage > 0) {
        parts[std::string(core::kParameterBroadcastSecondsPart)] =
            static_cast<double>(parameter_broadcast_ns(step.costs, step.choice)) * 1e-9;
      }
      if (step.choice.data_parallel->shard_stage >= 2) {
        parts[std::string(core::kGradientReduceSecondsPart)] =
            static_cast<double>(gradient_reduce_step_ns(step.costs, step.graph, step.choice)) * 1e-9;
        parts[std::string(core::kExposedGradientReduceSecondsPart)] = static_cast<double>(waits.reduce_ns) * 1e-9;
        if (step.choice.data_parallel->shard_stage >= 3) {
          parts[std::string(core::kParameterGatherSecondsPart)] = static_cast<double>(parameter_gather_step_ns(seq)) * 1e-9;
          parts[std::string(core::kExposedParameterGatherSecondsPart)] = static_cast<double>(waits.gather_ns) * 1e-9;
        }
      }
      return;
    }
  }
  void check(const CheckedChoice& c) const override {
    const core::StepChoice& choice = c.choice;
    if (!used_by(choice)) return;
    if (choice.workers() < 2) {
      throw core::InputError(c.source + ": $.world_size: data parallel needs at least 2 workers, got " + std::to_string(choice.workers()));
    }
    if (choice.data_parallel->shard_stage > 0 && c.trace.precision != core::Precision::Fp32) {
      throw core::InputError(c.source + ": $.data_parallel.shard_stage: a sharded worker steps float32 parameters, and the "
                             "trace is " + std::string(core::precision_name(c.trace.precision)));
    }
    if (choice.data_parallel->shard_stage > 0 && choice.ring_loss) {
      throw core::InputError(c.source + ": $.data_parallel.shard_stage: a contrastive model's ring loss runs replicated "
                             "(stage 0)");
    }
    const auto largest = [](const std::vector<std::int64_t>& sizes) {
      return sizes.empty() ? std::int64_t{0} : *std::max_element(sizes.begin(), sizes.end());
    };
    const auto first = choice.worker_micro_batches(0);
    const std::int64_t first_samples = std::accumulate(first.begin(), first.end(), std::int64_t{0});
    for (int r = 1; r < choice.workers(); ++r) {
      const auto sizes = choice.worker_micro_batches(r);
      if (std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0}) > first_samples || largest(sizes) > largest(first)) {
        throw core::InputError(c.source + ": $.data_parallel.micro_batches_per_worker: worker " + std::to_string(r) +
                               " carries more than worker 0, whose step the plan predicts (put the larger shares first)");
      }
    }
  }
};

}  // namespace

const Technique& data_parallel_technique() {
  static const DataParallel technique;
  return technique;
}

}  // namespace headroom::planner
