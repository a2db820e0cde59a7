// Inf-CL's ring variant across real worker processes (models/ring_contrastive_loss.h): N processes of
// headroom_ring_infcl_worker join through c10d's Gloo over loopback, each holds its rows of q and k,
// and the ring loss they compute equals the single-process loss, with the gradients of q, k and the
// log-scale (summed over the workers, as data parallel's all-reduce sums it).
#include <gtest/gtest.h>

#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "models/contrastive_loss.h"
#include "planner/ring_infcl_model.h"
#include "support/build_paths.h"
#include "support/ring_infcl_data.h"
#include "runtime/memory_recorder.h"

extern char** environ;

namespace headroom {
namespace {

namespace fs = std::filesystem;

struct RingCase {
  int workers;
  std::int64_t batch, dim;
  models::LossTiles tiles;
  double log_scale;
  std::string kind;
};

struct LossAndGrads {
  double loss = 0;
  torch::Tensor dq, dk, dscale;
  std::vector<double> peak_bytes, seconds;  // per worker: the loss's forward and backward
};

struct Spawned {
  std::vector<int> status;  // waitpid's, per rank
  fs::path dir;
};

// Starts every worker (rank `vanishing`, if any, exits once the shares are exchanged), each one's
// stderr in DIR/rankR.err, and waits for all, killing them after a minute.
Spawned spawn_ring(const RingCase& c, int vanishing = -1) {
  Spawned out;
  out.dir = fs::temp_directory_path() / ("headroom_ring_infcl." + std::to_string(::getpid()) + "." +
                                         std::to_string(c.workers) + c.kind + std::to_string(vanishing));
  fs::remove_all(out.dir);
  fs::create_directories(out.dir);
  std::vector<pid_t> pids;
  for (int r = 0; r < c.workers; ++r) {
    std::vector<std::string> args{HEADROOM_RING_WORKER,
                                  std::to_string(r),
                                  std::to_string(c.workers),
                                  (out.dir / "store").string(),
                                  std::to_string(c.batch),
                                  std::to_string(c.dim),
                                  std::to_string(c.tiles.rows),
                                  std::to_string(c.tiles.cols),
                                  std::to_string(c.log_scale),
                                  c.kind,
                                  (out.dir / ("rank" + std::to_string(r) + ".pt")).string()};
    if (r == vanishing) args.push_back("--vanish");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string err = (out.dir / ("rank" + std::to_string(r) + ".err")).string();
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid = 0;
    EXPECT_EQ(::posix_spawn(&pid, HEADROOM_RING_WORKER, &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  out.status.assign(pids.size(), -1);
  std::size_t left = pids.size();
  while (left > 0) {
    for (std::size_t r = 0; r < pids.size(); ++r) {
      if (out.status[r] != -1) continue;
      int s = 0;
      if (::waitpid(pids[r], &s, WNOHANG) == pids[r]) {
        out.status[r] = s;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (std::size_t r = 0; r < pids.size(); ++r) {
        if (out.status[r] == -1) ::kill(pids[r], SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return out;
}

// Runs every worker and collects their results: the loss of each, the gradients rank after rank,
// the log-scale's gradient summed.
LossAndGrads run_ring(const RingCase& c, std::vector<double>& losses) {
  const Spawned spawned = spawn_ring(c);
  const std::vector<int>& status = spawned.status;
  const fs::path& dir = spawned.dir;
  LossAndGrads out;
  std::vector<torch::Tensor> dq, dk;
  out.dscale = torch::zeros({});
  for (std::size_t r = 0; r < status.size(); ++r) {
    EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0) << "worker " << r << " status " << status[r];
    std::vector<torch::Tensor> saved;
    torch::load(saved, (dir / ("rank" + std::to_string(r) + ".pt")).string());
    losses.push_back(saved[0].item<double>());
    dq.push_back(saved[1]);
    dk.push_back(saved[2]);
    out.dscale = out.dscale + saved[3];
    out.peak_bytes.push_back(saved[4][0].item<double>());
    out.seconds.push_back(saved[4][1].item<double>());
  }
  out.loss = losses.front();
  out.dq = torch::cat(dq);
  out.dk = torch::cat(dk);
  fs::remove_all(dir);
  return out;
}

LossAndGrads run_single(const RingCase& c, std::optional<models::LossTiles> tiles, torch::Dtype dtype) {
  torch::Tensor q = ring_test::embeddings(c.kind, c.batch, c.dim, 4).to(dtype).requires_grad_(true);
  torch::Tensor k = ring_test::embeddings(c.kind, c.batch, c.dim, 5).to(dtype).requires_grad_(true);
  torch::Tensor t = torch::full({}, c.log_scale, torch::TensorOptions().dtype(dtype)).requires_grad_(true);
  torch::Tensor loss = tiles ? models::contrastive_loss_tiled(q, k, t, *tiles) : models::contrastive_loss_standard(q, k, t);
  loss.backward();
  return {loss.item<double>(), q.grad(), k.grad(), t.grad(), {}, {}};
}

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() /
         b.to(torch::kFloat64).abs().max().item<double>();
}

void ring_equals_single_process(const RingCase& c) {
  std::vector<double> losses;
  const LossAndGrads ring = run_ring(c, losses);
  ASSERT_EQ(losses.size(), static_cast<std::size_t>(c.workers));
  // Every worker holds the same global loss.
  for (const double l : losses) EXPECT_LE(std::abs(l - losses.front()) / std::abs(losses.front()), 1e-6);
  ASSERT_EQ(ring.dq.size(0), c.batch);
  const LossAndGrads standard = run_single(c, std::nullopt, torch::kFloat32);
  const LossAndGrads tiled = run_single(c, c.tiles, torch::kFloat32);
  for (const auto* single : {&standard, &tiled}) {
    SCOPED_TRACE(single == &standard ? "against the standard loss" : "against the single-process tiled loss");
    EXPECT_LE(std::abs(ring.loss - single->loss) / std::abs(single->loss), 1e-5);
    EXPECT_LE(rel(ring.dq, single->dq), 1e-5);
    EXPECT_LE(rel(ring.dk, single->dk), 1e-5);
    EXPECT_LE(rel(ring.dscale, single->dscale), 1e-5);
  }
  std::printf("ring N=%d B=%lld tiles %lldx%lld log-scale %.4f (%s): loss rel %.2e, dq %.2e, dk %.2e, dscale %.2e "
              "(vs standard fp32); vs tiled: loss %.2e dq %.2e dk %.2e dscale %.2e; worker 0 peak %.0f B\n",
              c.workers, static_cast<long long>(c.batch), static_cast<long long>(c.tiles.rows),
              static_cast<long long>(c.tiles.cols), c.log_scale, c.kind.c_str(),
              std::abs(ring.loss - standard.loss) / std::abs(standard.loss), rel(ring.dq, standard.dq),
              rel(ring.dk, standard.dk), rel(ring.dscale, standard.dscale),
              std::abs(ring.loss - tiled.loss) / std::abs(tiled.loss), rel(ring.dq, tiled.dq), rel(ring.dk, tiled.dk),
              rel(ring.dscale, tiled.dscale), ring.peak_bytes.front());
}

// 203 pairs: neither 2 nor 4 workers divide it (102/101; 51/51/51/50), nor do the 37 x 29 tiles.
TEST(RingInfCl, TwoWorkersEqualTheSingleProcessLoss) { ring_equals_single_process({2, 203, 32, {37, 29}, std::log(1 / 0.07), "unit"}); }
TEST(RingInfCl, FourWorkersEqualTheSingleProcessLoss) { ring_equals_single_process({4, 203, 32, {37, 29}, std::log(1 / 0.07), "unit"}); }

// CLIP's largest scale on 4-dimensional unit rows: many scaled logits pass fp32's exp limit (~88.7),
// and the loss is well conditioned enough that fp32 results agree to 1e-5.
TEST(RingInfCl, ScaleOfAHundredEqualsTheSingleProcessLoss) {
  const RingCase c{4, 203, 4, {37, 29}, std::log(100.0), "unit"};
  const auto q = ring_test::embeddings(c.kind, c.batch, c.dim, 4), k = ring_test::embeddings(c.kind, c.batch, c.dim, 5);
  ASSERT_TRUE(std::isinf(std::exp(100 * torch::mm(q, k.t()).max().item<float>()))) << "the case must pass fp32's exp limit";
  ring_equals_single_process(c);
}

TEST(RingInfCl, ScaleOfAHundredDoesNotOverflowAcrossWorkers) {
  const RingCase c{4, 130, 16, {32, 48}, std::log(100.0), "grouped"};
  const auto q = ring_test::embeddings(c.kind, c.batch, c.dim, 4), k = ring_test::embeddings(c.kind, c.batch, c.dim, 5);
  ASSERT_TRUE(std::isinf(std::exp(100 * torch::mm(q, k.t()).max().item<float>()))) << "the case must pass fp32's exp limit";
  std::vector<double> losses;
  const LossAndGrads ring = run_ring(c, losses);
  ASSERT_TRUE(std::isfinite(ring.loss));
  ASSERT_TRUE(torch::isfinite(ring.dq).all().item<bool>() && torch::isfinite(ring.dk).all().item<bool>());
  // At this scale fp32 rounding of logits near 100 is amplified in gradients whose terms nearly
  // cancel (tests/infcl_test.cpp): the ring is judged against the fp64 standard loss and must be as
  // close as the fp32 single-process losses are (within 2x) or within 1e-5; and against the fp32
  // single-process tiled loss, whose arithmetic it shares tile by tile, within 1e-5.
  const LossAndGrads exact = run_single(c, std::nullopt, torch::kFloat64);
  const LossAndGrads standard = run_single(c, std::nullopt, torch::kFloat32);
  const LossAndGrads tiled = run_single(c, c.tiles, torch::kFloat32);
  EXPECT_LE(std::abs(ring.loss - exact.loss) / exact.loss, 1e-5);
  const auto close = [](const torch::Tensor& mine, const torch::Tensor& s, const torch::Tensor& e) {
    EXPECT_LE(rel(mine, e), std::max(1e-5, 2 * rel(s, e))) << "standard fp32: " << rel(s, e);
  };
  close(ring.dq, standard.dq, exact.dq);
  close(ring.dk, standard.dk, exact.dk);
  close(ring.dscale, standard.dscale, exact.dscale);
  std::printf("ring N=4 B=130 log-scale ln 100: vs fp64 loss %.2e dq %.2e dk %.2e dscale %.2e; fp32 standard vs fp64: dq "
              "%.2e dk %.2e dscale %.2e; vs fp32 tiled: loss %.2e dq %.2e dk %.2e dscale %.2e\n",
              std::abs(ring.loss - exact.loss) / exact.loss, rel(ring.dq, exact.dq), rel(ring.dk, exact.dk),
              rel(ring.dscale, exact.dscale), rel(standard.dq, exact.dq), rel(standard.dk, exact.dk),
              rel(standard.dscale, exact.dscale), std::abs(ring.loss - tiled.loss) / tiled.loss, rel(ring.dq, tiled.dq),
              rel(ring.dk, tiled.dk), rel(ring.dscale, tiled.dscale));
}

// What the planner charges a worker for the ring (planner/ring_infcl_model.h) is what the ring
// holds: worker 0's peak = one process's tiled loss at worker 0's rows + the ring's buffers.
TEST(RingInfCl, EachWorkerHoldsItsRowsLossPlusThePlannedRingBuffers) {
  for (const int workers : {2, 3}) {
    SCOPED_TRACE(std::to_string(workers) + " workers");
    const RingCase c{workers, 512 * workers, 256, {128, 128}, std::log(1 / 0.07), "unit"};
    std::vector<double> losses;
    const LossAndGrads ring = run_ring(c, losses);
    // One process's tiled loss over worker 0's 512 rows, measured as the worker measures its ring.
    torch::Tensor q = ring_test::embeddings(c.kind, 512, c.dim, 4).requires_grad_(true);
    torch::Tensor k = ring_test::embeddings(c.kind, 512, c.dim, 5).requires_grad_(true);
    torch::Tensor t = torch::full({}, c.log_scale).requires_grad_(true);
    auto recorder = std::make_shared<runtime::MemoryRecorder>();
    {
      runtime::ScopedMemoryRecording recording(recorder);
      models::contrastive_loss_tiled(q, k, t, c.tiles).backward();
    }
    const planner::ContrastiveLossModel model(core::ContrastiveProfile{0, c.dim, {}});
    const double predicted =
        static_cast<double>(recorder->peak() + planner::ring_buffer_bytes(model, 512, workers).backward);
    std::printf("ring N=%d, 512 rows each, D=%lld: worker 0 peak %.0f B, one process at 512 rows %lld B + planned ring "
                "buffers = %.0f B (%+.3f%%)\n",
                workers, static_cast<long long>(c.dim), ring.peak_bytes.front(), static_cast<long long>(recorder->peak()),
                predicted, 100 * (predicted - ring.peak_bytes.front()) / ring.peak_bytes.front());
    EXPECT_LE(std::abs(predicted - ring.peak_bytes.front()) / ring.peak_bytes.front(), 0.01);
  }
}

// A worker that goes away while the blocks travel: the others fail at once, naming the ring's
// transfer as a collective's failure (the launcher's sign of a consequence, not a cause).
TEST(RingInfCl, AWorkerThatVanishesMidRingFailsTheOthers) {
  const RingCase c{3, 96, 16, {16, 16}, std::log(1 / 0.07), "unit"};
  const auto start = std::chrono::steady_clock::now();
  const Spawned spawned = spawn_ring(c, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  ASSERT_TRUE(WIFEXITED(spawned.status[1]));
  EXPECT_EQ(WEXITSTATUS(spawned.status[1]), 3);
  for (const int r : {0, 2}) {
    const int status = spawned.status[static_cast<std::size_t>(r)];
    ASSERT_TRUE(WIFEXITED(status)) << r << " ended by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 1) << r;
    const std::string err = [&] {
      std::ifstream in(spawned.dir / ("rank" + std::to_string(r) + ".err"));
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }();
    EXPECT_NE(err.find("collective failed in the ring loss's"), std::string::npos) << r << ": " << err;
  }
  fs::remove_all(spawned.dir);
}

}  // namespace
}  // namespace headroom
