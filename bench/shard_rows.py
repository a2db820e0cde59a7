#!/usr/bin/env python3
"""Sharded data parallel's rows in docs/results.md: each ZeRO stage at a budget where it is the least
stage that fits, planned and executed on two workers over Gloo.

For each model the zoo's preset is profiled once (SGD with momentum, whose state stage 1 shards, one
thread a worker, the loopback link measured). For each strategy set and stage, `plan --shard S` at a
budget of 1% above stage S's least (below stage S-1's least, so no lower stage fits); then `execute
--devices 2` twice: once as planned (each worker's peak, and the median step time over
--timed-steps after 3 warm-up steps, beside the plan's time as the run's calibration rescales it, and
worker 0's of it waiting in collectives beside the plan's waits),
once with --full-batch-reference (the weights after --steps steps against one process on the full
batch). One Markdown row each.

  python3 bench/shard_rows.py [--headroom build/default/headroom] [--models bert,gpt] [--batch 16] [--steps 5] [--timed-steps 60] [--timing-seconds 10] [--stages 0,1,2,3]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

PRESETS = {"bert": "mini", "gpt": "tiny"}
STRATEGIES = {"micro-batching": "mbp", "micro-batching, checkpointing": "mbp,checkpoint"}
STAGES = (0, 1, 2, 3)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def least_budget(headroom, trace, batch, strategies, stage, folder):
    """Stage `stage`'s least budget, as `plan` says where a byte is too little."""
    code, _, err = run([headroom, "plan", trace, "--budget", "1", "--batch", str(batch), "--devices", "2",
                        "--strategies", strategies, "--shard", str(stage), "-o", os.path.join(folder, "none.json")])
    found = re.search(r"the budget must be at least ([0-9.]+ [KMG]iB)", err)
    if code == 0 or not found:
        sys.exit(f"shard_rows.py: no least budget for stage {stage}: {err.strip()}")
    value, unit = found.group(1).split()
    return float(value) * {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]


def execute(headroom, plan, out, steps, reference):
    # Two workers sharing two cores take a few steps to settle, and a step now and then runs long:
    # the timed run's median is over more steps than the weights need.
    warmup = "1" if reference else "3"
    cmd = [headroom, "execute", plan, "--devices", "2", "--steps", str(steps), "--warmup", warmup, "-o", out]
    code, stdout, stderr = run(cmd + (["--full-batch-reference"] if reference else []))
    if code != 0:
        sys.exit(f"shard_rows.py: execute failed: {stderr.strip()}")
    with open(out) as f:
        return json.load(f)


def collective_waits(plan, report):
    """Worker 0's seconds a step waiting in collectives, (predicted, measured): its all-reduce, the
    parameters' broadcast, the gradients' reduces and the parameters' gathers. The prediction is
    moved as the run's calibration moved the plan's step."""
    dp = report["data_parallel"]
    scale = report["predicted"]["step_seconds"] / plan["predicted"]["step_seconds"]
    predicted = sum(dp.get(f"predicted_{part}_seconds", 0)
                    for part in ("exposed_allreduce", "broadcast", "gradient_reduce", "gather")) * scale
    measured = dp["workers"][0]["allreduce_wait_seconds"] + sum(
        dp.get(f"{part}_seconds", 0) for part in ("broadcast", "gradient_reduce", "gather"))
    return predicted, measured


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--headroom", default="build/default/headroom")
    ap.add_argument("--models", default="bert,gpt")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=5, help="steps before the weights are compared")
    # This machine's speed wanders by 15-30% over seconds to minutes (docs/results.md, "Timing over
    # seconds"): the profile's timing rounds and the timed run both span more of it than their defaults.
    ap.add_argument("--timed-steps", type=int, default=60, help="steps whose median time is the row's")
    ap.add_argument("--timing-seconds", type=float, default=10, help="the profile's timing rounds")
    ap.add_argument("--stages", default=",".join(str(s) for s in STAGES), help="the rows to run (every stage's least is found)")
    args = ap.parse_args()
    rows = [int(s) for s in args.stages.split(",")]
    folder = tempfile.mkdtemp(prefix="headroom-shard-")
    print("| model | strategies | stage | budget | plan | peak predicted / measured (worker 0, worker 1) | "
          "step s predicted / measured (error) | of it waiting in collectives | the rest | weights vs one process |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        trace = os.path.join(folder, model + ".json")
        code, _, err = run([args.headroom, "profile", "--model", model, "--set", "preset=" + PRESETS[model], "--optimizer", "sgd",
                            "--threads", "1", "--batch-sizes", "1,2,4,8", "--repeats", "2", "--timing-seconds", str(args.timing_seconds), "--measure-link", "-o", trace])
        if code != 0:
            sys.exit(f"shard_rows.py: profiling {model} failed: {err.strip()}")
        for label, strategies in STRATEGIES.items():
            leasts = {s: least_budget(args.headroom, trace, args.batch, strategies, s, folder) for s in STAGES}
            for stage in rows:
                budget = int(leasts[stage] * 1.01)
                if stage > 0 and budget >= leasts[stage - 1]:
                    print(f"| {model} | {label} | {stage} | | stage {stage - 1} fits as well: no budget where {stage} is the least |")
                    continue
                plan = os.path.join(folder, f"{model}-{strategies}-{stage}.json")
                code, stdout, err = run([args.headroom, "plan", trace, "--budget", str(budget), "--batch", str(args.batch),
                                         "--devices", "2", "--strategies", strategies, "--shard", str(stage), "-o", plan])
                if code != 0:
                    sys.exit(f"shard_rows.py: plan failed: {err.strip()}")
                with open(plan) as f:
                    p = json.load(f)
                shape = f"{len(p['micro_batches']) // 2} x {p['micro_batches'][0]}, {len(p.get('checkpointed_blocks', []))} ckpt"
                # Stage 3's unit of gathering, per block or per layer.
                shape += f", per {p['data_parallel']['gather']}" if "gather" in p.get("data_parallel", {}) else ""
                run_report = execute(args.headroom, plan, plan + ".report.json", args.timed_steps, False)
                ref_report = execute(args.headroom, plan, plan + ".ref.json", args.steps, True)
                peaks = ", ".join(f"{w['peak_bytes']:,}" for w in run_report["data_parallel"]["workers"])
                predicted, measured = run_report["predicted"]["step_seconds"], run_report["measured"]["step_seconds"]
                waits = collective_waits(p, run_report)
                print(f"| {model} | {label} | {stage} | {budget:,} | {shape} | {p['predicted']['peak_bytes']:,} / {peaks} "
                      f"({100 * run_report['errors']['peak_rel']:+.2f}%) | {predicted:.4f} / {measured:.4f} "
                      f"({100 * (predicted - measured) / measured:+.0f}%) | {waits[0]:.3f} / {waits[1]:.3f} | "
                      f"{predicted - waits[0]:.3f} / {measured - waits[1]:.3f} | "
                      f"{ref_report['data_parallel']['full_batch_weights_max_rel_diff']:.2e} |", flush=True)


if __name__ == "__main__":
    main()
