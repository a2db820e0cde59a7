// One worker of the ring Inf-CL test (tests/ring_infcl_test.cpp): joins the others through c10d's
// Gloo process group, computes the ring loss over its rows of the global batch, backpropagates it and
// saves the loss and its gradients for the test to compare with the single-process loss, with the
// bytes the loss's forward and backward allocated at most above its inputs and their wall time.
//
//   headroom_ring_infcl_worker RANK WORLD STORE_PATH BATCH DIM TILE_ROWS TILE_COLS LOG_SCALE KIND OUT [--vanish]
//
// --vanish: the worker exits once the ring's shares are exchanged, before any block travels (a
// worker that dies mid-loss).
#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include "executor/data_parallel.h"
#include "executor/ring_peers.h"
#include "models/ring_contrastive_loss.h"
#include "runtime/memory_recorder.h"
#include "support/ring_infcl_data.h"

int main(int argc, char** argv) {
  using namespace headroom;
  const bool vanish = argc == 12 && std::string(argv[11]) == "--vanish";
  if (argc != 11 && !vanish) {
    std::cerr << "usage: headroom_ring_infcl_worker RANK WORLD STORE_PATH BATCH DIM TILE_ROWS TILE_COLS LOG_SCALE KIND OUT\n";
    return 2;
  }
  try {
    torch::set_num_threads(1);
    const int rank = std::stoi(argv[1]), world = std::stoi(argv[2]);
    const std::int64_t batch = std::stoll(argv[4]), dim = std::stoll(argv[5]);
    const models::LossTiles tiles{std::stoll(argv[6]), std::stoll(argv[7])};
    const double log_scale = std::stod(argv[8]);
    const std::string kind = argv[9], out = argv[10];
    executor::Workers workers(executor::WorkerIdentity{rank, world, std::string("file:") + argv[3]}, torch::kCPU);
    executor::GroupRingPeers peers(workers);
    const std::int64_t first = ring_test::first_row(batch, world, rank), rows = ring_test::share(batch, world, rank);
    torch::Tensor q = ring_test::embeddings(kind, batch, dim, 4).narrow(0, first, rows).clone().requires_grad_(true);
    torch::Tensor k = ring_test::embeddings(kind, batch, dim, 5).narrow(0, first, rows).clone().requires_grad_(true);
    torch::Tensor t = torch::full({}, log_scale).requires_grad_(true);
    if (vanish) {
      peers.all_gather(rows);
      std::_Exit(3);
    }
    auto recorder = std::make_shared<runtime::MemoryRecorder>();
    torch::Tensor loss;
    const auto start = std::chrono::steady_clock::now();
    {
      runtime::ScopedMemoryRecording recording(recorder);
      loss = models::contrastive_loss_ring(q, k, t, tiles, peers);
      loss.backward();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const torch::Tensor figures = torch::tensor({static_cast<double>(recorder->peak()), seconds}, torch::kFloat64);
    torch::save(std::vector<torch::Tensor>{loss.detach(), q.grad(), k.grad(), t.grad(), figures}, out);
    std::cout << "rank " << rank << " of " << world << ": " << rows << " rows, loss " << loss.item<double>() << ", peak "
              << recorder->peak() << " B above q and k, " << seconds << " s forward and backward\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "rank " << argv[1] << ": " << e.what() << "\n";
    return 1;
  }
}
