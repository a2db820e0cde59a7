#!/usr/bin/env python3
"""What a stage-3 step's gathers cost on this machine outside headroom (docs/results.md, "Sharded data
parallel"): two Gloo processes of PyTorch broadcast each layer's parameters of a trace in turn, as a
stage-3 worker gathers them (twice a micro-batch, from alternating owners), once alone, once into
freshly allocated tensors under headroom's malloc regime, and once with a matrix product on both
workers before each broadcast, as the step's compute comes between them. Prints the seconds the
broadcasts took in each case and the time between them (the medians of 3), and the products' time
alone in one process.

  python3 bench/gather_contention.py TRACE.json [--micro-batches 8]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

# One thread a worker, as headroom's workers run (runtime/intra_op_threads.h): torch.set_num_threads
# does not reach OpenBLAS's own pthreads, which would run the products on every core.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("gather_contention.py: needs Debian's python3-torch (scripts/install-deps.sh --with-pytorch)")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
PRODUCTS = 5  # 128 x 128 by 128 x 512 products before each broadcast


def products(a, b):
    for _ in range(PRODUCTS):
        a @ b


def worker(rank, sizes, rounds, mode, results):
    # headroom's regime (core/host_memory.h): freed blocks stay in the heap.
    libc = ctypes.CDLL("libc.so.6")
    if libc.mallopt(M_MMAP_THRESHOLD, 1 << 30) != 1 or libc.mallopt(M_TRIM_THRESHOLD, 1 << 30) != 1:
        sys.exit("gather_contention.py: mallopt refused")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    kept = [torch.empty(s // 4) for s in sizes]
    a, b = torch.randn(128, 128), torch.randn(128, 512)
    seconds, totals = [], []
    for _ in range(3):
        dist.barrier()
        waited = 0.0
        begun = time.perf_counter()
        for _ in range(rounds):
            for k, size in enumerate(sizes):
                if mode == "between products":
                    products(a, b)
                tensor = kept[k] if mode == "alone" else torch.empty(size // 4)
                start = time.perf_counter()
                dist.broadcast(tensor, src=k % 2)
                waited += time.perf_counter() - start
        seconds.append(waited)
        totals.append(time.perf_counter() - begun)
    if rank == 0:
        results[mode] = (statistics.median(seconds), statistics.median(totals))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--micro-batches", type=int, default=8)
    args = ap.parse_args()
    with open(args.trace) as f:
        sizes = [layer["param_bytes"] for layer in json.load(f)["layers"] if layer["param_bytes"] > 0]
    rounds = 2 * args.micro_batches
    results = mp.Manager().dict()
    for mode in ("alone", "into fresh memory", "between products"):
        mp.spawn(worker, args=(sizes, rounds, mode, results), nprocs=2)
    a, b = torch.randn(128, 128), torch.randn(128, 512)
    torch.set_num_threads(1)
    start = time.perf_counter()
    for _ in range(rounds * len(sizes)):
        products(a, b)
    alone = time.perf_counter() - start
    print(f"{rounds * len(sizes)} broadcasts of {len(sizes)} layers' parameters, 2 Gloo processes, one thread each")
    for mode, (waited, total) in results.items():
        print(f"  {mode:20s} {waited:.3f} s in broadcasts, {total - waited:.3f} s in between")
    print(f"  the products alone, one process: {alone:.3f} s")


if __name__ == "__main__":
    main()
