#include "executor/data_parallel.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "core/statistics.h"

#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef HEADROOM_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "core/affine_fit.h"
#include "core/collective.h"
#include "core/errors.h"
#include "core/sharding.h"

namespace headroom::executor {

namespace {

struct TcpAddress {
  std::string host;
  std::uint16_t port = 0;
};

TcpAddress tcp_address(const std::string& store) {
  const std::string rest = store.substr(4);
  const auto colon = rest.rfind(':');
  const auto fail = [&] {
    throw core::InputError("store: expected file:PATH or tcp:HOST:PORT (port 1 to 65535), got '" + store + "'");
  };
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) fail();
  const std::string port = rest.substr(colon + 1);
  if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) fail();
  const long value = std::stol(port);
  if (value < 1 || value > 65535) fail();
  return {rest.substr(0, colon), static_cast<std::uint16_t>(value)};
}

c10::intrusive_ptr<c10d::Store> open_store(const WorkerIdentity& id) {
  if (id.store.rfind("file:", 0) == 0) {
    return c10::make_intrusive<c10d::FileStore>(id.store.substr(5), id.workers);
  }
  const TcpAddress address = tcp_address(id.store);
  c10d::TCPStoreOptions options;
  options.port = address.port;
  options.isServer = id.rank == 0;
  options.numWorkers = static_cast<std::size_t>(id.workers);
  options.waitWorkers = true;
  options.timeout = id.timeout;
  return c10::make_intrusive<c10d::TCPStore>(address.host, options);
}

}  // namespace

void WeightsDigest::add(const torch::Tensor& tensor) {
  const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
  const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
  const std::size_t n = t.numel() * t.element_size();
  for (std::size_t i = 0; i < n; ++i) hash_ = (hash_ ^ bytes[i]) * 1099511628211ull;
}

std::int64_t WeightsDigest::value() const {
  std::int64_t out;
  std::memcpy(&out, &hash_, sizeof out);
  return out;
}

void wait_collective(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
  named_as_collective(what, [&] { work->wait(); });
}

namespace {

// What a step puts between its collectives, on each worker's thread: a few matrix products, about
// half a millisecond of one core.
class ComputeSegment {
 public:
  ComputeSegment() : a_(torch::rand({128, 128})), b_(torch::rand({128, 512})), out_(torch::empty({128, 512})) {}
  void run() {
    for (int i = 0; i < 3; ++i) at::mm_out(out_, a_, b_);
  }

 private:
  at::Tensor a_, b_, out_;
};

enum LinkCollective { kAllReduce, kBroadcast, kReduce, kGather, kLinkCollectives };
// How a worker times a collective: compute segments alone, each followed by the collective (as a
// step waits for a gather or a bucket between its layers), and each with the collective started
// before it and waited for after (as a step overlaps one with its compute).
enum LinkPhase { kComputeAlone, kBetween, kBeside, kLinkPhases };
using PhaseSeconds = std::array<double, kLinkPhases>;

// One worker's mean seconds per repeat of each phase, for one collective and size.
PhaseSeconds time_link_phases(c10d::ProcessGroupGloo& group, ComputeSegment& compute, int collective, std::int64_t bytes) {
  // A sharded step's broadcasts and reduces come from and go to each owner in turn.
  std::vector<at::Tensor> tensors{torch::ones({bytes / 4}, torch::kFloat32)};
  const at::Tensor values = torch::ones({bytes / 4}, torch::kFloat32);
  const auto start = [&](int root) {
    if (collective == kAllReduce) return group.allreduce(tensors);
    if (collective == kBroadcast || collective == kGather) {
      if (collective == kGather) {
        // As stage 3 gathers a unit: into fresh memory, its owner's values copied in first. On the
        // 2-core machine that takes half as long again as a broadcast into a tensor filled before
        // (docs/results.md, "Collectives between and beside compute").
        tensors.front() = torch::empty({bytes / 4}, torch::kFloat32);
        if (group.getRank() == root) tensors.front().copy_(values);
      }
      c10d::BroadcastOptions broadcast;
      broadcast.rootRank = root;
      return group.broadcast(tensors, broadcast);
    }
    c10d::ReduceOptions reduce;
    reduce.rootRank = root;
    return group.reduce(tensors, reduce);
  };
  start(0)->wait();  // warm: connections, buffers
  // A step runs hundreds of collectives, and what it waits for is their mean: on a loaded host a
  // few in ten wait milliseconds for a thread to be woken, which a median over a few hides.
  const int repeats = static_cast<int>(std::clamp<std::int64_t>((std::int64_t{128} << 20) / bytes, 8, 64));
  PhaseSeconds seconds{};
  for (int phase = 0; phase < kLinkPhases; ++phase) {
    group.barrier()->wait();
    const auto begun = std::chrono::steady_clock::now();
    for (int r = 0; r < repeats; ++r) {
      if (phase == kComputeAlone) {
        compute.run();
      } else if (phase == kBetween) {
        compute.run();
        start(r % 2)->wait();
      } else {
        const auto work = start(r % 2);
        compute.run();
        work->wait();
      }
    }
    seconds[static_cast<std::size_t>(phase)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - begun).count() / repeats;
  }
  return seconds;
}

}  // namespace

core::CollectiveLink measure_loopback_link() {
  const std::vector<std::int64_t> sizes{std::int64_t{4} << 10, std::int64_t{64} << 10, std::int64_t{1} << 20,
                                        std::int64_t{4} << 20, std::int64_t{16} << 20};
  auto store = c10::make_intrusive<c10d::HashStore>();
  // Per collective, size and worker, the phases' mean seconds.
  std::vector<std::vector<std::array<PhaseSeconds, 2>>> seconds(kLinkCollectives, std::vector<std::array<PhaseSeconds, 2>>(sizes.size()));
  std::exception_ptr failure;
  const auto worker = [&](int rank) {
    try {
      auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(60000));
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      options->threads = 1;
      auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, 2, options);
      ComputeSegment compute;
      for (int c = 0; c < kLinkCollectives; ++c) {
        for (std::size_t k = 0; k < sizes.size(); ++k) {
          seconds[static_cast<std::size_t>(c)][k][static_cast<std::size_t>(rank)] = time_link_phases(*group, compute, c, sizes[k]);
        }
      }
    } catch (...) {
      if (rank == 0) failure = std::current_exception();
    }
  };
  std::thread other(worker, 1);
  worker(0);
  other.join();
  if (failure) std::rethrow_exception(failure);
  // A collective between compute takes what it adds to the compute alone, on the slower worker
  // (what a step waits for). The sizes span four orders of magnitude, and the small ones are what
  // tell the latency.
  const std::vector<double> bytes(sizes.begin(), sizes.end());
  std::vector<double> beside_shares;
  const auto fit = [&](int collective, const std::string& what) {
    std::vector<double> between;
    for (const auto& pair : seconds[static_cast<std::size_t>(collective)]) {
      const auto added = [&](LinkPhase phase) {
        return std::max(pair[0][phase] - pair[0][kComputeAlone], pair[1][phase] - pair[1][kComputeAlone]);
      };
      between.push_back(std::max(added(kBetween), 1e-6));
      beside_shares.push_back(std::max(added(kBeside), 0.0) / between.back());
    }
    return core::fit_link_line(bytes, between, what);
  };
  const core::LinkLine allreduce = fit(kAllReduce, "the loopback all-reduce");
  core::CollectiveLink link;
  link.bytes_per_second = allreduce.bytes_per_second;
  // A ring all-reduce of two workers sends two messages one after the other.
  link.latency_ns = allreduce.latency_ns / 2;
  link.source = "measured: Gloo all-reduce, broadcast, reduce and gather over loopback between compute, 2 workers";
  for (const auto& [collective, line, what] : {std::tuple{kBroadcast, &link.broadcast, "the loopback broadcast"},
                                               std::tuple{kReduce, &link.reduce, "the loopback reduce"},
                                               std::tuple{kGather, &link.gather, "the loopback gather"}}) {
    const core::LinkLine measured = fit(collective, what);
    *line = {measured.bytes_per_second, measured.latency_ns};
  }
  link.beside_compute = std::clamp(core::median(beside_shares), 0.0, core::CollectiveLink::kMostBesideCompute);
  return link;
}

void check_store_address(const std::string& store) {
  if (store.rfind("file:", 0) == 0) {
    if (store.size() == 5) throw core::InputError("store: file: needs a path, as in file:/tmp/headroom-store");
    return;
  }
  if (store.rfind("tcp:", 0) == 0) {
    tcp_address(store);
    return;
  }
  throw core::InputError("store: expected file:PATH or tcp:HOST:PORT, got '" + store + "'");
}

Workers::Workers(const WorkerIdentity& identity, torch::Device device) : identity_(identity) {
  check_store_address(identity.store);
  // A peer that dies closes its sockets, and a write to one raises SIGPIPE, which ends a C++ process
  // at once (Python ignores it, so PyTorch's launchers never see it): ignored, the write fails, the
  // collective throws, and this worker says so and exits as a collective's failure.
  std::signal(SIGPIPE, SIG_IGN);
  auto store = open_store(identity);
  const auto on_device = torch::TensorOptions().dtype(torch::kInt64).device(device);
  digest_ = torch::zeros({1}, on_device);
  for (int r = 0; r < identity.workers; ++r) digests_.push_back(torch::zeros({1}, on_device));
  if (device.is_cuda()) {
#ifdef HEADROOM_WITH_NCCL
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = identity.timeout;
    auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, identity.rank, identity.workers, options);
    group_ = std::shared_ptr<CollectiveGroup>(group.release(), [](CollectiveGroup* g) { c10::raw::intrusive_ptr::decref(g); });
    backend_ = "nccl";
    return;
#else
    throw core::InputError("device cuda: data parallel on CUDA uses NCCL, and this build has no NCCL (configure with "
                           "-DHEADROOM_WITH_CUDA=ON -DHEADROOM_WITH_NCCL=ON against a libtorch built with it)");
#endif
  }
  auto options = c10d::ProcessGroupGloo::Options::create(identity.timeout);
  // Loopback: the workers of `execute --devices N` share this machine.
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  options->threads = 1;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  try {
    group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, identity.rank, identity.workers, options);
  } catch (const std::exception& e) {
    throw std::runtime_error("collective failed while the workers joined: " + std::string(e.what()).substr(0, 300));
  }
  group_ = std::shared_ptr<CollectiveGroup>(group.release(), [](CollectiveGroup* g) { c10::raw::intrusive_ptr::decref(g); });
  backend_ = "gloo";
}

Workers::~Workers() = default;

std::vector<std::vector<double>> Workers::gather(const std::vector<double>& mine) {
  std::vector<at::Tensor> input{torch::tensor(mine, torch::kFloat64)};
  std::vector<std::vector<at::Tensor>> output(1);
  for (int r = 0; r < size(); ++r) output[0].push_back(torch::empty({static_cast<std::int64_t>(mine.size())}, torch::kFloat64));
  wait_collective(group_->allgather(output, input), "gathering the workers' measurements");
  std::vector<std::vector<double>> out;
  for (const auto& t : output[0]) {
    const auto* d = t.data_ptr<double>();
    out.emplace_back(d, d + t.numel());
  }
  return out;
}

void Workers::release_last_collective() {
  std::vector<at::Tensor> tensors{digest_};
  wait_collective(group_->broadcast(tensors, c10d::BroadcastOptions{}), "releasing the last collective");
}

void Workers::check_weights_agree(const std::vector<torch::Tensor>& parameters, const std::string& when) {
  WeightsDigest digest;
  for (const auto& p : parameters) digest.add(p);
  check_digests_agree(digest.value(), when);
}

void Workers::check_digests_agree(std::int64_t digest, const std::string& when) {
  digest_.fill_(digest);
  std::vector<at::Tensor> input{digest_};
  std::vector<std::vector<at::Tensor>> output{digests_};
  wait_collective(group_->allgather(output, input), "comparing the workers' weights");
  std::string differ;
  const std::int64_t reference = digests_[0].item<std::int64_t>();
  for (int r = 1; r < size(); ++r) {
    if (digests_[static_cast<std::size_t>(r)].item<std::int64_t>() != reference) {
      differ += (differ.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  if (!differ.empty()) {
    throw std::runtime_error("workers disagree on the weights " + when + ": rank(s) " + differ + " differ from rank 0");
  }
}

struct GradientSync::State {
  struct Bucket {
    std::vector<torch::Tensor> parameters;
    std::vector<std::int64_t> offsets;  // element offset of each parameter's gradient in the buffer
    torch::Tensor buffer;
    int pending = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };
  Workers* workers = nullptr;
  std::vector<Bucket> buckets;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // kept alive: the hooks live on them
  std::mutex mutex;
  bool armed = false;
  std::size_t next_launch = 0;  // buckets start in order, as on every worker

  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0 && !buckets[next_launch].work) {
      Bucket& b = buckets[next_launch++];
      std::vector<at::Tensor> tensors{b.buffer};
      b.work = workers->group().allreduce(tensors);
    }
  }

  // Hooks each parameter's gradient accumulator, where it is not hooked yet: a parameter whose data
  // changes dtype (the gradient check's float32 reference under bf16) gets a new accumulator.
  // `accumulators` holds one per parameter, bucket by bucket, slot by slot.
  void hook_accumulators() {
    std::size_t k = 0;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      for (std::size_t slot = 0; slot < buckets[b].parameters.size(); ++slot, ++k) {
        auto accumulator = torch::autograd::impl::grad_accumulator(buckets[b].parameters[slot]);
        if (accumulators[k] == accumulator) continue;
        accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, b, slot](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
              ready(b, slot);
              return outputs;
            }));
        accumulators[k] = std::move(accumulator);
      }
    }
  }

  void ready(std::size_t bucket, std::size_t slot) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!armed) return;
    Bucket& b = buckets[bucket];
    const torch::Tensor& p = b.parameters[slot];
    b.buffer.narrow(0, b.offsets[slot], p.numel()).copy_(p.grad().reshape({-1}));
    --b.pending;
    launch_ready();
  }
};

GradientSync::GradientSync(const models::Model& model, Workers& workers, std::int64_t bucket_cap_bytes)
    : state_(std::make_unique<State>()) {
  state_->workers = &workers;
  const auto& layers = model.layers();
  // As the planner groups them (core::allreduce_gradient_bytes): bfloat16 gradients go as float32
  // over Gloo, whose all-reduce in libtorch 1.13 refuses bfloat16 ("Invalid scalar type").
  const core::Precision precision = model.context().precision;
  const bool nccl = workers.backend() == "nccl";
  const bool widen = core::widens_gradients_for_allreduce(precision, nccl);
  std::size_t by_layer = 0;
  std::vector<std::int64_t> layer_bytes;
  // Only trainable parameters have gradients to exchange.
  const auto trained = [](const torch::Tensor& p) { return p.requires_grad(); };
  for (const auto& layer : layers) {
    std::int64_t bytes = 0;
    for (const auto& p : layer.parameters) bytes += trained(p) ? p.numel() * static_cast<std::int64_t>(p.element_size()) : 0;
    layer_bytes.push_back(core::allreduce_gradient_bytes(bytes, precision, nccl));
    by_layer += static_cast<std::size_t>(std::count_if(layer.parameters.begin(), layer.parameters.end(), trained));
  }
  if (by_layer != model.trainable_parameters().size()) {
    throw core::InputError("data parallel needs the model's parameters held by its layers (the zoo's models); this model's "
                           "are held by a module of its own");
  }
  for (const auto& span : core::gradient_buckets(layer_bytes, bucket_cap_bytes)) {
    State::Bucket bucket;
    std::int64_t numel = 0;
    // Backward reaches the bucket's later layers first; the order inside a bucket does not matter.
    for (int l = span.last_layer; l >= span.first_layer; --l) {
      for (const auto& p : layers[static_cast<std::size_t>(l)].parameters) {
        if (!trained(p)) continue;
        bucket.parameters.push_back(p);
        bucket.offsets.push_back(numel);
        numel += p.numel();
      }
    }
    const auto options = bucket.parameters.front().options().requires_grad(false);
    bucket.buffer = torch::zeros({numel}, widen ? options.dtype(torch::kFloat) : options);
    state_->buckets.push_back(std::move(bucket));
  }
  std::size_t hooked = 0;
  for (const auto& b : state_->buckets) hooked += b.parameters.size();
  state_->accumulators.resize(hooked);
  state_->hook_accumulators();
}

GradientSync::~GradientSync() = default;

void GradientSync::arm(const std::vector<torch::Tensor>& final_already) {
  state_->hook_accumulators();
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    for (auto& b : state_->buckets) {
      b.pending = static_cast<int>(b.parameters.size());
      b.work.reset();
    }
    state_->next_launch = 0;
    state_->armed = true;
  }
  for (const auto& p : final_already) {
    bool found = false;
    for (std::size_t b = 0; b < state_->buckets.size() && !found; ++b) {
      for (std::size_t slot = 0; slot < state_->buckets[b].parameters.size() && !found; ++slot) {
        if (!state_->buckets[b].parameters[slot].is_same(p)) continue;
        if (!p.grad().defined()) throw std::logic_error("GradientSync::arm: a parameter said to be final has no gradient");
        state_->ready(b, slot);
        found = true;
      }
    }
    if (!found) throw std::logic_error("GradientSync::arm: a parameter said to be final is in no bucket");
  }
}

double GradientSync::finish() {
  const auto start = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->armed = false;
    for (auto& b : state_->buckets) {
      if (b.pending > 0) {
        throw std::runtime_error("a bucket's gradients were not all produced by the last backward (a parameter the "
                                 "step did not use)");
      }
    }
    state_->launch_ready();
  }
  for (auto& b : state_->buckets) {
    wait_collective(b.work, "the gradients' all-reduce");
    b.work.reset();
    // The sum over workers of b_i/B-weighted gradients is the full batch's: the scale is 1.
    for (std::size_t slot = 0; slot < b.parameters.size(); ++slot) {
      torch::Tensor p = b.parameters[slot];
      p.mutable_grad().copy_(b.buffer.narrow(0, b.offsets[slot], p.numel()).view_as(p));
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::size_t GradientSync::bucket_count() const { return state_->buckets.size(); }

std::int64_t GradientSync::buffer_bytes() const {
  std::int64_t total = 0;
  for (const auto& b : state_->buckets) total += b.buffer.numel() * static_cast<std::int64_t>(b.buffer.element_size());
  return total;
}

struct ShardedParameters::State {
  Workers* workers = nullptr;
  int stage = 1;
  std::vector<torch::Tensor> parameters;  // the trainable ones, in layer order
  std::vector<std::int64_t> offsets;      // each one's first element in the flat buffers
  torch::Tensor flat;                     // the parameters' data
  torch::Tensor flat_grad;                // stage 1: their gradients
  torch::Tensor owned_grad;               // stage 2: the gradients of this worker's range
  // Stage 2: the buffers gradients are reduced from, each as large as the largest parameter or
  // core::kShardedReducePieceElements. Gradients are packed into one in the order backward makes
  // them and reduced together once it is full (and at a micro-batch's end), a collective per run of
  // parts with one owner; the other buffer is filled meanwhile. (Reduced from the gradient itself,
  // it would outlive its reduce: Gloo's worker thread lets go of a collective's tensors only once
  // the next one runs.)
  struct Slot {
    torch::Tensor buffer;
    std::int64_t filled = 0;
    struct Part {
      int owner = 0;
      std::int64_t at = 0;  // in the buffer
      std::int64_t length = 0;
      std::int64_t element = 0;  // its first, in the flat order
    };
    std::vector<Part> parts;
    std::vector<c10::intrusive_ptr<c10d::Work>> in_flight;
  };
  std::array<Slot, 2> slots;
  std::size_t filling = 0;  // the slot gradients are packed into
  std::vector<torch::Tensor> pieces;      // this worker's range, as the optimizer steps it
  std::vector<core::ElementRange> ranges;  // every worker's
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // kept alive: the hooks live on them
  bool reducing = false;
  std::int64_t reduced = 0;  // gradients reduced since start_step
  std::int64_t reduces_started = 0;  // collectives, since start_step
  double reduce_seconds = 0;
  // Stage 3: per unit (a block's layers or a layer's, as the plan gathers: core::parameter_units), its
  // trainable parameters' buffer (undefined where it has none), and the values of this worker's range.
  struct UnitShard {
    torch::Tensor values;
    core::ElementRange elements;  // in the flat order
    std::int64_t parameters = 0;
    std::int64_t made = 0;  // gradients backward has made of them since they were gathered
    int last_layer = -1;    // its last layer with parameters: a forward lets them go after it
    bool gathered = true;
    bool for_backward = false;  // a backward of one of its layers reads them
  };
  std::vector<UnitShard> units;
  std::vector<std::size_t> unit_of_layer;
  std::vector<bool> holds_parameters;  // per model layer
  std::vector<std::size_t> unit_of;    // per parameter
  torch::Tensor owned;
  double gather_seconds = 0;
  // Stage 3: the units a micro-batch gathers for its work, in order, recorded from the first one
  // (every micro-batch runs the same layers the same way), and the gather started one ahead: each
  // gather but a micro-batch's first is started as the one before it is taken, so it runs beside
  // that unit's work.
  enum class Order { Unknown, Recording, Known };
  Order order_state = Order::Unknown;
  std::vector<std::size_t> order;
  std::size_t taken = 0;  // of this micro-batch's gathers
  struct Prefetch {
    std::size_t unit = 0;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
  };
  std::optional<Prefetch> prefetch;

  // Stage 3: fresh memory for the unit's parameters, and the broadcasts that fill it from their owners.
  std::vector<c10::intrusive_ptr<c10d::Work>> start_gather(std::size_t unit) {
    UnitShard& shard = units[unit];
    c10::Storage storage = shard.values.storage();
    const auto bytes = static_cast<std::size_t>(shard.elements.size() * 4);
    storage.set_data_ptr_noswap(storage.allocator()->allocate(bytes));
    storage.set_nbytes(bytes);
    shard.gathered = true;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for_each_owner(shard.elements.begin, shard.elements.end, [&](int r, std::int64_t from, std::int64_t to) {
      std::vector<at::Tensor> part{shard.values.narrow(0, from - shard.elements.begin, to - from)};
      if (r == workers->rank()) part.front().copy_(owned.narrow(0, from - mine().begin, to - from));
      c10d::BroadcastOptions options;
      options.rootRank = r;
      works.push_back(named_as_collective("gathering a unit's parameters from worker " + std::to_string(r),
                                          [&] { return workers->group().broadcast(part, options); }));
    });
    return works;
  }

  static void wait_gather(const std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
    for (const auto& work : works) wait_collective(work, "gathering a unit's parameters");
  }

  // The gather started ahead, waited for: where a micro-batch takes it, and where one that stopped
  // early did not (so that no broadcast still writes into memory let go of). Its unit stays gathered.
  void settle_prefetch() {
    if (!prefetch) return;
    wait_gather(prefetch->works);
    prefetch.reset();
  }

  // Stage 3: the unit's parameters gathered now (outside a micro-batch's work: the checks').
  void gather(std::size_t unit) {
    settle_prefetch();
    if (!units[unit].values.defined() || units[unit].gathered) return;
    wait_gather(start_gather(unit));
  }

  // Stage 3: the unit's parameters for its work in a micro-batch (the hooks'): the prefetched
  // gather waited for, or a gather of its own; then the next one in the order started.
  void gather_for_work(std::size_t unit) {
    UnitShard& shard = units[unit];
    const bool prefetched = prefetch && prefetch->unit == unit;
    // Held already: by an earlier layer of the unit, or since its recompute.
    if (!shard.values.defined() || (shard.gathered && !prefetched)) return;
    if (order_state == Order::Known && (taken >= order.size() || order[taken] != unit)) {
      throw std::logic_error("stage 3: a micro-batch gathered unit " + std::to_string(unit) + " as its gather " +
                             std::to_string(taken) + ", out of the order the first one took");
    }
    const auto start = std::chrono::steady_clock::now();
    if (prefetched) {
      settle_prefetch();
    } else {
      wait_gather(start_gather(unit));
    }
    gather_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (order_state == Order::Recording) order.push_back(unit);
    ++taken;
    // The next unit's is started now, unless it is this one again (a layer's backward right after
    // its forward), whose memory is still in use.
    if (order_state == Order::Known && taken < order.size() && order[taken] != unit) {
      prefetch = Prefetch{order[taken], start_gather(order[taken])};
    }
  }

  void begin_micro_batch() {
    settle_prefetch();
    if (order_state == Order::Recording) order_state = Order::Known;
    if (order_state == Order::Unknown) order_state = Order::Recording;
    taken = 0;
  }

  // Stage 3: the memory of the unit's parameters goes; the tensors (and what autograd saved of
  // them) stay, empty, until the next gather fills them again.
  void release(std::size_t unit) {
    UnitShard& shard = units[unit];
    if (!shard.values.defined() || !shard.gathered) return;
    c10::Storage storage = shard.values.storage();
    storage.set_data_ptr_noswap(c10::DataPtr(nullptr, storage.device()));
    storage.set_nbytes(0);
    shard.gathered = false;
    shard.made = 0;
  }

  const core::ElementRange& mine() const { return ranges[static_cast<std::size_t>(workers->rank())]; }

  void link_gradients() {
    for (std::size_t k = 0; k < parameters.size(); ++k) {
      parameters[k].mutable_grad() = flat_grad.narrow(0, offsets[k], parameters[k].numel()).view(parameters[k].sizes());
    }
  }

  // Calls part(owner, from, to) for each worker's part of the flat elements [first, end), from the
  // first owner's or, `last_owner_first`, from the last's.
  template <typename F>
  void for_each_owner(std::int64_t first, std::int64_t end, F part, bool last_owner_first = false) const {
    for (std::size_t k = 0; k < ranges.size(); ++k) {
      const std::size_t r = last_owner_first ? ranges.size() - 1 - k : k;
      const core::ElementRange shared = core::overlap({first, end}, ranges[r]);
      if (shared.size() > 0) part(static_cast<int>(r), shared.begin, shared.end);
    }
  }

  // Waits for the slot's reduces and adds the parts this worker owns into its range; the slot is empty.
  void finish(Slot& slot) {
    for (auto& work : slot.in_flight) wait_collective(work, "a gradient's reduce");
    for (const auto& part : slot.parts) {
      if (part.owner != workers->rank()) continue;
      owned_grad.narrow(0, part.element - mine().begin, part.length).add_(slot.buffer.narrow(0, part.at, part.length));
    }
    slot.in_flight.clear();
    slot.parts.clear();
    slot.filled = 0;
  }

  // The filling slot's reduces start, one per run of parts with one owner; the other slot, once its
  // reduces are done, is filled next.
  void send() {
    Slot& slot = slots[filling];
    for (std::size_t first = 0; first < slot.parts.size();) {
      std::size_t end = first + 1;
      while (end < slot.parts.size() && slot.parts[end].owner == slot.parts[first].owner) ++end;
      const std::int64_t at = slot.parts[first].at;
      std::vector<at::Tensor> run{slot.buffer.narrow(0, at, slot.parts[end - 1].at + slot.parts[end - 1].length - at)};
      c10d::ReduceOptions options;
      options.rootRank = slot.parts[first].owner;
      slot.in_flight.push_back(named_as_collective("a gradient's reduce to worker " + std::to_string(options.rootRank),
                                                   [&] { return workers->group().reduce(run, options); }));
      ++reduces_started;
      first = end;
    }
    filling = (filling + 1) % slots.size();
    finish(slots[filling]);
  }

  // Elements [first, end) of the flat order, packed into the filling slot (sent whenever it is full).
  // Backward makes the gradients from the last layer's to the first's, so the owners' parts come
  // from the last owner's to the first's: a parameter on an owners' boundary packs its last owner's
  // part first, which continues the run the gradients before it left (a collective less each side).
  void pack(const torch::Tensor& flat_gradient, std::int64_t first, std::int64_t end) {
    const auto owner_part = [&](int r, std::int64_t from, std::int64_t to) {
      for (std::int64_t at = from; at < to;) {
        Slot& slot = slots[filling];
        const std::int64_t n = std::min(to - at, slot.buffer.numel() - slot.filled);
        slot.buffer.narrow(0, slot.filled, n).copy_(flat_gradient.narrow(0, at - first, n));
        slot.parts.push_back({r, slot.filled, n, at});
        slot.filled += n;
        at += n;
        if (slot.filled == slot.buffer.numel()) send();
      }
    };
    for_each_owner(first, end, owner_part, true);
  }

  // Stage 2: parameter k's gradient, just made, packed for its reduce and let go; backward goes on
  // while the reduces run. A micro-batch's last gradient sends what is packed.
  void reduce(std::size_t k) {
    if (!reducing) return;
    const auto start = std::chrono::steady_clock::now();
    torch::Tensor& p = parameters[k];
    pack(p.grad().reshape({-1}), offsets[k], offsets[k] + p.numel());
    p.mutable_grad() = torch::Tensor();
    ++reduced;
    if (reduced % static_cast<std::int64_t>(parameters.size()) == 0 && slots[filling].filled > 0) send();
    reduce_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Stage 3: the unit's last gradient made, its backward is done with its parameters.
    if (stage >= 3) {
      UnitShard& shard = units[unit_of[k]];
      if (++shard.made == shard.parameters) release(unit_of[k]);
    }
  }

  // The trainable parameters in layer order (each once) and their units; returns their elements.
  // Throws InputError where one is not float32.
  std::int64_t collect_parameters(const models::Model& model, core::GatherUnit gather) {
    std::vector<int> blocks;
    for (const auto& layer : model.layers()) blocks.push_back(layer.block);
    const std::vector<int> unit_numbers = core::parameter_units(blocks, gather);
    units.resize(unit_numbers.empty() ? 0 : static_cast<std::size_t>(unit_numbers.back()) + 1);
    std::int64_t elements = 0;
    for (std::size_t l = 0; l < model.layers().size(); ++l) {
      const auto u = static_cast<std::size_t>(unit_numbers[l]);
      unit_of_layer.push_back(u);
      UnitShard& unit = units[u];
      if (unit.parameters == 0) unit.elements = {elements, elements};
      const std::int64_t before = unit.parameters;
      for (const auto& p : model.layers()[l].parameters) {
        if (!p.requires_grad()) continue;
        if (std::any_of(parameters.begin(), parameters.end(), [&](const torch::Tensor& q) { return q.is_same(p); })) continue;
        if (p.scalar_type() != torch::kFloat) {
          throw core::InputError("shard_stage: a sharded worker steps float32 parameters, and this model has " +
                                 std::string(c10::toString(p.scalar_type())) + " ones");
        }
        parameters.push_back(p);
        offsets.push_back(elements);
        unit_of.push_back(u);
        ++unit.parameters;
        elements += p.numel();
      }
      holds_parameters.push_back(unit.parameters > before);
      if (!holds_parameters.back()) continue;
      unit.elements.end = elements;
      unit.last_layer = static_cast<int>(l);
      unit.for_backward = unit.for_backward || core::backward_reads_parameters(model.layers()[l].kind);
    }
    return elements;
  }

  void hook_accumulators() {
    for (std::size_t k = 0; k < parameters.size(); ++k) {
      auto accumulator = torch::autograd::impl::grad_accumulator(parameters[k]);
      accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            reduce(k);
            return outputs;
          }));
      accumulators.push_back(std::move(accumulator));
    }
  }
};

ShardedParameters::ShardedParameters(const models::Model& model, Workers& workers, int stage, core::GatherUnit gather)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.workers = &workers;
  s.stage = stage;
  const std::int64_t elements = s.collect_parameters(model, gather);
  if (s.parameters.size() != model.trainable_parameters().size()) {
    throw core::InputError("shard_stage: sharding needs the model's parameters held by its layers (the zoo's models)");
  }
  if (s.parameters.empty()) throw core::InputError("shard_stage: the model has no trainable parameters to shard");
  const auto options = s.parameters.front().options().requires_grad(false);
  for (int r = 0; r < workers.size(); ++r) s.ranges.push_back(core::owned_elements(elements, workers.size(), r));
  const core::ElementRange& mine = s.mine();
  // Stage 3: a buffer per unit, the range's values apart; below it one buffer for all.
  if (stage >= 3) {
    s.owned = torch::empty({mine.size()}, options);
    for (auto& unit : s.units) {
      if (unit.parameters > 0) unit.values = torch::empty({unit.elements.size()}, options);
    }
  } else {
    s.flat = torch::empty({elements}, options);
  }
  for (std::size_t k = 0; k < s.parameters.size(); ++k) {
    torch::Tensor& p = s.parameters[k];
    const State::UnitShard& unit = s.units[s.unit_of[k]];
    torch::Tensor range = stage >= 3 ? unit.values.narrow(0, s.offsets[k] - unit.elements.begin, p.numel())
                                     : s.flat.narrow(0, s.offsets[k], p.numel());
    range.copy_(p.detach().reshape({-1}));
    // The same tensor, its data now the buffer's range: every module holding it sees it.
    p.set_data(range.view(p.sizes()));
  }
  if (stage >= 3) {
    for (std::size_t u = 0; u < s.units.size(); ++u) {
      const State::UnitShard& unit = s.units[u];
      const core::ElementRange kept = core::overlap(unit.elements, mine);
      if (kept.size() > 0) {
        s.owned.narrow(0, kept.begin - mine.begin, kept.size()).copy_(unit.values.narrow(0, kept.begin - unit.elements.begin, kept.size()));
      }
      s.release(u);
    }
  }
  // The pieces' gradients: views of the summed gradients (stage 1) or of the range's (stage 2).
  torch::Tensor gradients;
  if (stage >= 2) {
    s.owned_grad = torch::zeros({mine.size()}, options);
    std::int64_t largest = 0;
    for (const auto& p : s.parameters) largest = std::max<std::int64_t>(largest, p.numel());
    for (auto& slot : s.slots) slot.buffer = torch::empty({core::reduce_buffer_elements(largest)}, options);
    gradients = s.owned_grad;
    s.hook_accumulators();
  } else {
    s.flat_grad = torch::zeros({elements}, options);
    s.link_gradients();
    gradients = s.flat_grad.narrow(0, mine.begin, mine.size());
  }
  for (std::int64_t at = 0; at < mine.size(); at += core::kShardedOptimizerPieceElements) {
    const std::int64_t length = std::min(core::kShardedOptimizerPieceElements, mine.size() - at);
    torch::Tensor piece = stage >= 3 ? s.owned.narrow(0, at, length) : s.flat.narrow(0, mine.begin + at, length);
    piece.mutable_grad() = gradients.narrow(0, at, length);
    s.pieces.push_back(std::move(piece));
  }
}

ShardedParameters::~ShardedParameters() = default;

const std::vector<torch::Tensor>& ShardedParameters::owned_pieces() const { return state_->pieces; }

void ShardedParameters::start_step() {
  State& s = *state_;
  if (s.stage < 2) {
    s.flat_grad.zero_();
    s.link_gradients();
    return;
  }
  s.owned_grad.zero_();
  for (auto& p : s.parameters) p.mutable_grad() = torch::Tensor();
  s.reduced = 0;
  s.reduces_started = 0;
  s.reduce_seconds = 0;
  s.gather_seconds = 0;
  s.reducing = true;
  if (s.stage >= 3) release_all();
}

double ShardedParameters::finish_backward() {
  State& s = *state_;
  if (s.stage < 2) return 0;
  s.reducing = false;
  const auto start = std::chrono::steady_clock::now();
  for (auto& slot : s.slots) s.finish(slot);
  s.reduce_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto count = static_cast<std::int64_t>(s.parameters.size());
  if (s.reduced == 0 || s.reduced % count != 0) {
    throw std::runtime_error("stage 2: the step's backward passes reduced " + std::to_string(s.reduced) +
                             " gradients, not a whole number of the model's " + std::to_string(count) +
                             " (a parameter a backward did not reach)");
  }
  return s.reduce_seconds;
}

std::int64_t ShardedParameters::reduces_started() const { return state_->reduces_started; }

void ShardedParameters::gather_for_check() {
  State& s = *state_;
  if (s.stage >= 3) gather_all();
  if (s.stage < 2) return;
  // Each parameter's gradient, its parts broadcast from their owners into it.
  for (std::size_t k = 0; k < s.parameters.size(); ++k) {
    torch::Tensor& p = s.parameters[k];
    p.mutable_grad() = torch::zeros_like(p);
    const torch::Tensor gradient = p.grad().view({-1});
    const std::int64_t first = s.offsets[k];
    const std::int64_t end = first + p.numel();
    s.for_each_owner(first, end, [&](int r, std::int64_t from, std::int64_t to) {
      std::vector<at::Tensor> part{gradient.narrow(0, from - first, to - from)};
      if (r == s.workers->rank()) part.front().copy_(s.owned_grad.narrow(0, from - s.mine().begin, to - from));
      c10d::BroadcastOptions options;
      options.rootRank = r;
      wait_collective(s.workers->group().broadcast(part, options), "gathering the gradients from worker " + std::to_string(r));
    });
  }
  // The last gradient, let go of before the measured steps count memory.
  s.workers->release_last_collective();
}

double ShardedParameters::broadcast() {
  const auto start = std::chrono::steady_clock::now();
  State& s = *state_;
  if (s.stage >= 3) return 0;
  for (std::size_t r = 0; r < s.ranges.size(); ++r) {
    if (s.ranges[r].size() == 0) continue;
    std::vector<at::Tensor> tensors{s.flat.narrow(0, s.ranges[r].begin, s.ranges[r].size())};
    c10d::BroadcastOptions options;
    options.rootRank = static_cast<std::int64_t>(r);
    wait_collective(s.workers->group().broadcast(tensors, options), "the parameters' broadcast from worker " + std::to_string(r));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ShardedParameters::begin_micro_batch() {
  if (state_->stage >= 3) state_->begin_micro_batch();
}

void ShardedParameters::before(int layer) {
  State& s = *state_;
  const auto l = static_cast<std::size_t>(layer);
  if (s.stage >= 3 && s.holds_parameters[l]) s.gather_for_work(s.unit_of_layer[l]);
}

void ShardedParameters::after_forward(int layer) {
  State& s = *state_;
  const auto l = static_cast<std::size_t>(layer);
  if (s.stage >= 3 && s.units[s.unit_of_layer[l]].last_layer == layer) s.release(s.unit_of_layer[l]);
}

void ShardedParameters::before_backward(int layer) {
  State& s = *state_;
  const auto l = static_cast<std::size_t>(layer);
  if (s.stage >= 3 && s.holds_parameters[l] && s.units[s.unit_of_layer[l]].for_backward) s.gather_for_work(s.unit_of_layer[l]);
}

double ShardedParameters::gather_seconds() const { return state_->gather_seconds; }

void ShardedParameters::gather_all() {
  for (std::size_t u = 0; u < state_->units.size(); ++u) state_->gather(u);
}

void ShardedParameters::release_all() {
  state_->settle_prefetch();
  for (std::size_t u = 0; u < state_->units.size(); ++u) state_->release(u);
}

std::int64_t ShardedParameters::gathered_digest() {
  State& s = *state_;
  WeightsDigest digest;
  std::size_t k = 0;
  for (std::size_t u = 0; u < s.units.size(); ++u) {
    const bool held = s.units[u].gathered;
    s.gather(u);
    for (; k < s.parameters.size() && s.unit_of[k] == u; ++k) digest.add(s.parameters[k]);
    if (!held) s.release(u);
  }
  return digest.value();
}

}  // namespace headroom::executor
