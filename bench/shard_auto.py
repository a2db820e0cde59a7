#!/usr/bin/env python3
"""`plan --devices 2 --shard auto` from the budget that holds the whole replicated step down to the
least any stage needs (docs/results.md): the stage chosen at each budget, its plan, and its
predicted and measured samples/s (`execute --devices 2`).

  python3 bench/shard_auto.py [--headroom build/default/headroom] [--model gpt] [--batch 16] [--points 6]
                              [--timing-seconds 10] [--timed-steps 60]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

PRESETS = {"bert": "mini", "gpt": "tiny"}


def run(cmd, allowed=(0,)):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in allowed:
        sys.exit(f"shard_auto.py: {' '.join(cmd[:3])} failed: {r.stderr.strip()}")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--headroom", default="build/default/headroom")
    ap.add_argument("--model", default="gpt")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--points", type=int, default=6)
    # This machine's speed wanders by 15-30% over seconds to minutes (docs/results.md, "Timing over
    # seconds"): the profile's timing rounds and the run's steps both span more of it than their defaults.
    ap.add_argument("--timing-seconds", type=float, default=10, help="the profile's timing rounds")
    ap.add_argument("--timed-steps", type=int, default=60, help="steps whose median time is each row's")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="headroom-auto-")
    trace = os.path.join(folder, "trace.json")
    run([args.headroom, "profile", "--model", args.model, "--set", "preset=" + PRESETS[args.model], "--optimizer", "sgd",
         "--threads", "1", "--batch-sizes", "1,2,4,8", "--repeats", "2", "--timing-seconds", str(args.timing_seconds), "--measure-link", "-o", trace])
    plan = os.path.join(folder, "plan.json")
    base = [args.headroom, "plan", trace, "--batch", str(args.batch), "--devices", "2", "--strategies", "mbp,checkpoint"]
    # The whole share, replicated: its peak with the plan's 5% margin.
    run(base + ["--budget", "64GiB", "--shard", "0", "-o", plan])
    with open(plan) as f:
        top = int(json.load(f)["predicted"]["peak_bytes"] / 0.95) + 1
    err = run(base + ["--budget", "1", "-o", plan], allowed=(3,)).stderr
    value, unit = re.search(r"the budget must be at least ([0-9.]+) ([KMG]iB)", err).groups()
    least = int(float(value) * {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]) + 1
    print("| budget | stage chosen | plan | samples/s predicted / measured | error |")
    print("|---|---|---|---|---|")
    for k in range(args.points):
        budget = int(top * (least / top) ** (k / (args.points - 1)))
        run(base + ["--budget", str(budget), "-o", plan])
        with open(plan) as f:
            p = json.load(f)
        out = plan + ".report.json"
        # The median of --timed-steps steps after 3 (two workers sharing two cores take a few to settle), beside the
        # plan's speed as the run's calibration rescales it.
        run([args.headroom, "execute", plan, "--devices", "2", "--steps", str(args.timed_steps), "--warmup", "3", "-o", out])
        with open(out) as f:
            report = json.load(f)
        predicted = report["predicted"]["samples_per_second"]
        measured = report["measured"]["samples_per_second"]
        shape = f"{len(p['micro_batches']) // 2} x {p['micro_batches'][0]}, {len(p.get('checkpointed_blocks', []))} ckpt"
        # Stage 3's unit of gathering, per block or per layer.
        shape += f", per {p['data_parallel']['gather']}" if "gather" in p.get("data_parallel", {}) else ""
        print(f"| {budget:,} | {p['data_parallel'].get('shard_stage', 0)} | {shape} | {predicted:.1f} / {measured:.1f} | "
              f"{100 * (predicted - measured) / measured:+.1f}% |", flush=True)


if __name__ == "__main__":
    main()
