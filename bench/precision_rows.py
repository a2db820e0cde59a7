#!/usr/bin/env python3
"""The zoo's models in each precision headroom runs: one Markdown row per model and precision.

Each model is profiled (`headroom profile --model M --precision P`, one process per command as a user
runs them), planned at 60% of its whole batch's need in that precision (`plan --strategies none` at an
unbounded budget gives the need; the default strategies, so L2L where nothing else fits, as
for the mlp, whose training state is more than 60% of its need; where 60% is below what even L2L
needs, at the least budget the planner names), and executed three times under that budget.
Printed: static bytes per parameter (parameters, gradients, optimizer state, as measured), activation
bytes per sample (what the layers keep for backward at the largest profiled batch, per sample), the
whole batch's need, the largest batch that runs whole (no micro-batches, no checkpointing) within a
budget fixed per model (the first precision's whole batch's need, so that precision's answer is the
batch itself), the plan, predicted and measured peak (signed: above 0, predicted over) and samples/s
(the median of the three runs, their range beside it, and the error of the median prediction
against the median measurement; above 0, predicted too fast), each run at least `--seconds` of steps
as predicted (two by default; `--steps` is the least). The same plan run again on a shared 2-core
machine measures up to 15% apart for millisecond steps (docs/results.md, "Timing over seconds"), so
no one run is the machine's speed; `--timing-seconds 10 --seconds 6` times both the profile and the
runs over more of its wandering (docs/design.md, "Time on the machine at hand"). Where a plan's peak comes out more than 1% under its prediction, or above it, at micro-batch
sizes the trace lacks, those sizes are profiled into the trace (`profile --add-to`), and the plan
made again at the same budget and run gives one more row, "P, S added".

  python3 bench/precision_rows.py [--headroom build/default/headroom] [--models mlp,cnn,bert,gpt]
      [--precisions fp32,bf16-autocast,bf16] [--batch 32] [--batch-sizes 1,2,4,8,16,32] [--steps 5] [--repeats 3]
      [--timing-seconds 2] [--seconds 2]
      [--torchscript M.pt --input SPEC [--input SPEC ...] [--depth N] [--ts-batch 16] [--ts-batch-sizes 1,2,4,8,16]]

With --torchscript the module is one more model (named by its file), profiled with its inputs.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile


def run(command):
    return subprocess.run(command, capture_output=True, text=True)


def last_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "?"


def largest_whole_batch(H, trace, budget, work):
    """The largest batch whose step runs whole within `budget` (a batch of 1 that does not: 0)."""
    out = os.path.join(work, "largest.json")

    def fits(batch):
        return run([H, "plan", trace, "--budget", str(budget), "--batch", str(batch), "--strategies", "none", "--margin", "0",
                    "-o", out]).returncode == 0

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
        if high > 1 << 20:
            return low
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", default=os.path.join(root, "build/default/headroom"))
    parser.add_argument("--models", default="mlp,cnn,bert,gpt")
    parser.add_argument("--precisions", default="fp32,bf16-autocast,bf16")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batch-sizes", default="1,2,4,8,16,32")
    parser.add_argument("--steps", type=int, default=5)
    # Millisecond steps (the mlp's, the cnn's) need more of each to see past a shared machine's noise.
    parser.add_argument("--repeats", type=int, default=3, help="profile --repeats")
    # A shared machine's speed wanders over seconds: the longer both sides time, the less a row
    # reads of where it happened to be (see the docstring).
    parser.add_argument("--timing-seconds", type=float, default=2.0, help="profile --timing-seconds")
    parser.add_argument("--seconds", type=float, default=2.0, help="the least seconds of steps, as predicted, each run takes")
    parser.add_argument("--torchscript")
    parser.add_argument("--input", action="append", default=[])
    parser.add_argument("--depth")
    parser.add_argument("--ts-batch", type=int, default=16)
    parser.add_argument("--ts-batch-sizes", default="1,2,4,8,16")
    args = parser.parse_args()
    for flag, value in (("--timing-seconds", args.timing_seconds), ("--seconds", args.seconds)):
        if not 0 <= value <= 3600:
            parser.error(f"{flag}: expected 0 to 3600 seconds, got {value}")
    H = args.headroom
    work = tempfile.mkdtemp(prefix="headroom-precision-")
    print("| model | precision | static B/param | activations/sample | whole batch needs | largest whole batch in the "
          "first's need | budget (60%) | plan | predicted peak | measured peak | peak error | samples/s predicted "
          "| measured (median of 3, range) | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    models = [(name, ["--model", name], args.batch, args.batch_sizes) for name in args.models.split(",") if name]
    if args.torchscript:
        source = ["--torchscript", args.torchscript] + [x for spec in args.input for x in ("--input", spec)]
        if args.depth:
            source += ["--depth", args.depth]
        models.append((os.path.basename(args.torchscript), source, args.ts_batch, args.ts_batch_sizes))
    for name, source, batch, batch_sizes in models:
        fixed_budget = None
        for precision in args.precisions.split(","):
            row = f"| {name} | {precision} "
            trace = os.path.join(work, f"{name}-{precision}.json")
            p = run([H, "profile"] + source + ["--precision", precision, "--batch-sizes", batch_sizes,
                     "--repeats", str(args.repeats), "--timing-seconds", str(args.timing_seconds), "-o", trace])
            if p.returncode:
                print(row + f"| profile: {last_line(p.stderr)} |", flush=True)
                continue
            t = json.load(open(trace))
            element = 2 if precision == "bf16" else 4  # bf16 keeps bfloat16 parameters, the others float32
            params = sum(layer["param_bytes"] for layer in t["layers"]) / element
            static = t["steps"][-1]["static_bytes"]
            largest_profiled = t["batch_sizes"][-1]
            kept = sum(layer["samples"][-1]["kept_bytes"] for layer in t["layers"])
            whole = os.path.join(work, f"{name}-{precision}-whole.json")
            w = run([H, "plan", trace, "--budget", "1TiB", "--batch", str(batch), "--strategies", "none", "-o", whole])
            if w.returncode:
                print(row + f"| plan: {last_line(w.stderr)} |", flush=True)
                continue
            need = json.load(open(whole))["predicted"]["peak_bytes"]
            if fixed_budget is None:
                fixed_budget = need
            largest = f"{largest_whole_batch(H, trace, fixed_budget, work)} in {fixed_budget / 2**20:.1f} MiB"
            budget = int(0.6 * need)
            plan = os.path.join(work, f"{name}-{precision}-plan.json")
            q = run([H, "plan", trace, "--budget", str(budget), "--batch", str(batch), "-o", plan])
            least = re.search(r"so the budget must be at least ([0-9.]+) (KiB|MiB|GiB)", q.stderr) if q.returncode else None
            if least:
                # 60% is below what the training state needs: the least budget the planner names.
                budget = int(float(least.group(1)) * {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[least.group(2)]) + 1
                q = run([H, "plan", trace, "--budget", str(budget), "--batch", str(batch), "-o", plan])
            if q.returncode:
                print(row + f"| {static / params:.1f} | {kept / largest_profiled / 1024:.1f} KiB | {need / 2**20:.1f} MiB "
                      f"| {largest} | {budget / 2**20:.1f} MiB | plan: {last_line(q.stderr)} |", flush=True)
                continue
            shown = f"{budget / 2**20:.1f} MiB" + (f" (the least, {100 * budget / need:.0f}%)" if least else "")
            prefix = row + (f"| {static / params:.1f} | {kept / largest_profiled / 1024:.1f} KiB | {need / 2**20:.1f} MiB "
                            f"| {largest} | {shown} ")
            line, sizes = executed_row(H, plan, work, f"{name}-{precision}", args.steps, args.seconds)
            print(prefix + line, flush=True)
            # A peak more than 1% under its prediction, or above it, at sizes the trace lacks (execute's warning):
            # those sizes profiled into the trace, planned again at the same budget and run.
            if sizes:
                added = ",".join(map(str, sizes))
                a = run([H, "profile"] + source + ["--precision", precision, "--batch-sizes", added, "--repeats", str(args.repeats),
                         "--timing-seconds", str(args.timing_seconds), "--add-to", trace, "-o", trace])
                if a.returncode:
                    print(row.replace(f"| {precision} ", f"| {precision}, {added} added ") + f"| profile: {last_line(a.stderr)} |",
                          flush=True)
                    continue
                q = run([H, "plan", trace, "--budget", str(budget), "--batch", str(batch), "-o", plan])
                if q.returncode:
                    print(row + f"| plan with {added} added: {last_line(q.stderr)} |", flush=True)
                    continue
                line, _ = executed_row(H, plan, work, f"{name}-{precision}-added", args.steps, args.seconds)
                print(prefix.replace(f"| {precision} ", f"| {precision}, {added} added ", 1) + line, flush=True)


def executed_row(H, plan, work, tag, steps, seconds):
    """The plan run three times: its row's cells from the plan on, and the micro-batch sizes its trace lacks
    where the peak came out more than 1% under the prediction or above it (empty otherwise)."""
    choice = json.load(open(plan))
    mb = choice["micro_batches"]
    shape = f"{len(mb)}x{mb[0]}" + ("*" if len(set(mb)) > 1 else "")
    if choice.get("checkpointed_blocks"):
        shape += f", {len(choice['checkpointed_blocks'])} ckpt"
    # At least `seconds` of steps as predicted (two, as `headroom demo` runs them, by default): a shared
    # machine runs at one speed for a few tenths of a second, then at another, and the median of five
    # 12 ms steps saw one of them (docs/results.md, "Timing over seconds").
    predicted_step = choice["predicted"]["step_seconds"]
    if predicted_step > 0:
        steps = max(steps, math.ceil(seconds / predicted_step))
    reports = []
    for attempt in range(3):
        report = os.path.join(work, f"{tag}-report{attempt}.json")
        e = run([H, "execute", plan, "--steps", str(steps), "-o", report])
        if e.returncode:
            return f"| execute: {last_line(e.stderr)} |", []
        reports.append(json.load(open(report)))
    r = reports[0]
    predicted, measured = r["predicted"]["peak_bytes"], max(x["measured"]["peak_bytes"] for x in reports)
    # execute moves a prediction to the machine's speed as it calibrates it in that run (where that
    # differs from the plan's by more than the calibration's noise): the predictions' median too.
    speed = sorted(x["predicted"]["samples_per_second"] for x in reports)[len(reports) // 2]
    speeds = sorted(x["measured"]["samples_per_second"] for x in reports)
    measured_speed = speeds[len(speeds) // 2]
    profiled = json.load(open(choice["trace"]["path"]))["batch_sizes"]
    missed = predicted > 1.01 * measured or predicted < measured
    lacking = sorted({b for b in mb if b not in profiled and b < profiled[-1]}) if missed else []
    return (f"| {shape} | {predicted:,} | {measured:,} | {100 * (predicted - measured) / measured:+.2f}% | {speed:.1f} "
            f"| {measured_speed:.1f} ({speeds[0]:.1f}-{speeds[-1]:.1f}) | {100 * (speed - measured_speed) / measured_speed:+.1f}% |"), lacking


if __name__ == "__main__":
    sys.exit(main())
