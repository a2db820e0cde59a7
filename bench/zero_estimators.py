#!/usr/bin/env python3
"""Per-worker memory of sharded data parallel: what DeepSpeed's published formulas give for each ZeRO
stage beside headroom's prediction and measurement of the whole step's peak (docs/results.md).

DeepSpeed's estimators count the model states alone (parameters, gradients, optimizer state), never
activations or buffers. Two columns per stage, both from the ZeRO paper's per-stage formulas
(Rajbhandari et al. 2020, table 1), which DeepSpeed's memory-requirements docs publish:
  stage 0: (2 + 2 + K) P    stage 1: 2P + 2P + K P / N    stage 2: 2P + (2 + K) P / N    stage 3: (2 + 2 + K) P / N
- "as published": mixed-precision Adam, K = 12 (float32 master weights and two moments).
- "this run's bytes": the same formulas with this run's bytes per parameter (float32 parameters and
  gradients, 4 each, and the trace's measured optimizer state per parameter as K).
Then headroom's plan at `--shard S` (`--strategies none`: each worker's share whole, in one micro-batch) and `execute --devices N`: worker 0's predicted and every worker's measured peak.

  python3 bench/zero_estimators.py [--headroom build/default/headroom] [--models bert,gpt] [--workers 2,4] [--batch 16]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PRESETS = {"bert": "mini", "gpt": "tiny"}
STAGES = (0, 1, 2, 3)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"zero_estimators.py: {' '.join(cmd[:3])} failed: {r.stderr.strip()}")
    return r.stdout


def zero_formula(stage, params, workers, param_bytes, grad_bytes, k):
    if stage == 0:
        return (param_bytes + grad_bytes + k) * params
    if stage == 1:
        return (param_bytes + grad_bytes) * params + k * params / workers
    if stage == 2:
        return param_bytes * params + (grad_bytes + k) * params / workers
    return (param_bytes + grad_bytes + k) * params / workers


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--headroom", default="build/default/headroom")
    ap.add_argument("--models", default="bert,gpt")
    ap.add_argument("--workers", default="2,4")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--budget", default="4GiB", help="large: each stage's plan is its fastest, not a squeezed one")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="headroom-zero-")
    print("| model | N | stage | DeepSpeed formula, as published (K=12) | DeepSpeed formula, this run's bytes | "
          "headroom: step peak predicted | measured (each worker) |")
    print("|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        trace = os.path.join(folder, model + ".json")
        run([args.headroom, "profile", "--model", model, "--set", "preset=" + PRESETS[model], "--threads", "1",
             "--batch-sizes", "1,2,4,8", "--repeats", "2", "--measure-link", "-o", trace])
        with open(trace) as f:
            t = json.load(f)
        params = sum(layer["param_bytes"] for layer in t["layers"]) // 4
        k = t["optimizer"]["state_bytes_per_param"]
        for workers in (int(w) for w in args.workers.split(",")):
            for stage in STAGES:
                plan = os.path.join(folder, f"{model}-{workers}-{stage}.json")
                run([args.headroom, "plan", trace, "--budget", args.budget, "--batch", str(args.batch), "--devices",
                     str(workers), "--shard", str(stage), "--strategies", "none", "-o", plan])
                with open(plan) as f:
                    p = json.load(f)
                out = plan + ".report.json"
                run([args.headroom, "execute", plan, "--devices", str(workers), "--steps", "3", "--warmup", "1", "-o", out])
                with open(out) as f:
                    report = json.load(f)
                published = zero_formula(stage, params, workers, 2, 2, 12)
                ours = zero_formula(stage, params, workers, 4, 4, k)
                measured = ", ".join(f"{w['peak_bytes']:,}" for w in report["data_parallel"]["workers"])
                # Stage 3's unit of gathering, per block or per layer.
                gather = p.get("data_parallel", {}).get("gather")
                shown = f"{stage}, per {gather}" if gather else str(stage)
                print(f"| {model} | {workers} | {shown} | {published:,.0f} | {ours:,.0f} | "
                      f"{p['predicted']['peak_bytes']:,} | {measured} |", flush=True)


if __name__ == "__main__":
    main()
