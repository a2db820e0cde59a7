#!/usr/bin/env python3
"""What sharding buys (docs/results.md): the deepest zoo gpt that one per-worker budget trains at each
ZeRO stage on two workers, planned, then executed.

gpt (hidden 128, heads 2, sequence 128, vocabulary 8192) is profiled at growing depths; at each
stage the deepest one `plan --shard S` fits under the budget is executed with `execute --devices
2` (worker 0's predicted and every worker's measured peak). One Markdown row per stage.

  python3 bench/shard_largest.py [--headroom build/default/headroom] [--budget 96MiB] [--batch 8] [--depths 2,4,6,8,10,12]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(cmd, allowed=(0,)):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in allowed:
        sys.exit(f"shard_largest.py: {' '.join(cmd[:3])} failed: {r.stderr.strip()}")
    return r.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--headroom", default="build/default/headroom")
    ap.add_argument("--budget", default="96MiB")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--depths", default="2,4,6,8,10,12")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="headroom-largest-")
    traces = {}
    for depth in (int(d) for d in args.depths.split(",")):
        trace = os.path.join(folder, f"gpt{depth}.json")
        run([args.headroom, "profile", "--model", "gpt", "--set", "preset=tiny", "--set", f"layers={depth}", "--optimizer",
             "sgd", "--threads", "1", "--batch-sizes", "1,2,4", "--repeats", "2", "--measure-link", "-o", trace])
        traces[depth] = trace
    print(f"| stage | deepest gpt under {args.budget} a worker | parameters | plan | peak predicted / measured (worker 0, worker 1) |")
    print("|---|---|---|---|---|")
    for stage in (0, 1, 2, 3):
        deepest = None
        for depth, trace in traces.items():
            plan = os.path.join(folder, f"gpt{depth}-{stage}.json")
            if run([args.headroom, "plan", trace, "--budget", args.budget, "--batch", str(args.batch), "--devices", "2",
                    "--shard", str(stage), "--strategies", "mbp,checkpoint", "-o", plan], allowed=(0, 3)) == 0:
                deepest = (depth, plan, trace)
        if deepest is None:
            print(f"| {stage} | none | | | |")
            continue
        depth, plan, trace = deepest
        out = plan + ".report.json"
        run([args.headroom, "execute", plan, "--devices", "2", "--steps", "3", "--warmup", "1", "-o", out])
        with open(plan) as f:
            p = json.load(f)
        with open(out) as f:
            report = json.load(f)
        with open(trace) as f:
            params = sum(layer["param_bytes"] for layer in json.load(f)["layers"]) // 4
        peaks = ", ".join(f"{w['peak_bytes']:,}" for w in report["data_parallel"]["workers"])
        shape = f"{len(p['micro_batches']) // 2} x {p['micro_batches'][0]}, {len(p.get('checkpointed_blocks', []))} ckpt"
        # Stage 3's unit of gathering, per block or per layer.
        shape += f", per {p['data_parallel']['gather']}" if "gather" in p.get("data_parallel", {}) else ""
        print(f"| {stage} | {depth} layers | {params:,} | {shape} | {p['predicted']['peak_bytes']:,} / {peaks} "
              f"({100 * report['errors']['peak_rel']:+.2f}%) |", flush=True)


if __name__ == "__main__":
    main()
