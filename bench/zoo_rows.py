#!/usr/bin/env python3
"""The zoo check of bench/time_accuracy, run as a user runs headroom: one process per command.

Every zoo model at two sizes is profiled afresh (`headroom profile`, up to the whole batch), planned
at two budgets between its least and its whole batch's need (`headroom plan`, the default strategies
but L2L), and each plan executed twice (`headroom execute --steps 5`, each a fresh process). One
Markdown row per run: predicted and measured samples/s as `execute` reports them (the prediction
moved to the machine as timed around the run), the signed throughput error (above 0: predicted too
fast), the run's step-to-step spread and how far the machine's calibration moved during it.
time_accuracy runs all of this inside one process, whose later runs can be slower than any
`headroom execute` of the same plan; this one measures what a user's commands measure.

  python3 bench/zoo_rows.py [--headroom build/default/headroom] [--steps 5] [MODEL ...]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ZOO = [
    ("mlp", [("depth 4", [], "4,8,16,32,64,128", 128), ("depth 8, hidden 1024", ["depth=8", "hidden=1024"], "4,8,16,32,64", 64)]),
    ("cnn", [("width 16", [], "4,8,16,32,64,128", 128), ("width 32, 2 blocks", ["width=32", "blocks=2"], "4,8,16,32,64", 64)]),
    ("bert", [("tiny", ["preset=tiny"], "2,4,8,16,32", 32), ("mini", ["preset=mini"], "2,4,8,16,32", 32)]),
    ("gpt", [("tiny", ["preset=tiny"], "2,4,8,16,32", 32), ("mini", ["preset=mini"], "2,4,8,16,32", 32)]),
    ("clip", [("default", [], "64,128,256,512,1024", 1024), ("image 32", ["image=32"], "64,128,256,512", 512)]),
]
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def run(command):
    return subprocess.run(command, capture_output=True, text=True)


def spread(values):
    """(max - min) / median: the step-to-step spread execute reports (core::relative_spread)."""
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", default=os.path.join(root, "build/default/headroom"))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("models", nargs="*")
    args = parser.parse_args()
    H = args.headroom
    work = tempfile.mkdtemp(prefix="headroom-zoo-rows-")
    print("| model | size | budget | plan | predicted samples/s | measured samples/s | error (signed) | step spread | machine moved |")
    print("|---|---|---|---|---|---|---|---|---|")
    errors = []
    for model, sizes in ZOO:
        if args.models and model not in args.models:
            continue
        # What the trace has measurements for: Tempo layers (mlp's GELU, the transformers'),
        # Inf-CL's tiles (clip).
        strategies = "mbp,checkpoint" + {"clip": ",infcl", "cnn": ""}.get(model, ",tempo")
        for label, settings, batch_sizes, batch in sizes:
            trace = os.path.join(work, "trace.json")
            command = [H, "profile", "--model", model, "--batch-sizes", batch_sizes, "--repeats", "3", "-o", trace]
            if settings:
                command += ["--set", *settings]
            p = run(command)
            if p.returncode:
                sys.exit(f"{model} {label}: profile failed: {p.stderr.strip()}")
            least_text = run([H, "plan", trace, "--budget", "1", "--batch", str(batch), "--strategies", strategies,
                              "-o", os.path.join(work, "none.json")]).stderr
            m = re.search(r"the budget must be at least ([0-9.]+) (B|KiB|MiB|GiB|TiB)", least_text)
            if not m:
                sys.exit(f"{model} {label}: no least budget in: {least_text.strip()}")
            least = float(m.group(1)) * UNITS[m.group(2)]
            whole_plan = os.path.join(work, "whole.json")
            w = run([H, "plan", trace, "--budget", "1TiB", "--batch", str(batch), "--strategies", "none", "-o", whole_plan])
            if w.returncode:
                sys.exit(f"{model} {label}: {w.stderr.strip()}")
            whole = json.load(open(whole_plan))["predicted"]["peak_bytes"]
            for fraction in (0.2, 0.7):
                budget = int(least + fraction * max(whole - least, 0))
                plan = os.path.join(work, "plan.json")
                q = run([H, "plan", trace, "--budget", str(budget), "--batch", str(batch), "--strategies", strategies, "-o", plan])
                if q.returncode:
                    print(f"| {model} | {label} | {budget / 2**20:.1f} MiB | no plan: {' '.join(q.stderr.split())} | | | | | |")
                    continue
                p = json.load(open(plan))
                mb = p["micro_batches"]
                shape = f"{len(mb)}x{mb[0]}" + ("*" if len(set(mb)) > 1 else "")
                if p.get("checkpointed_blocks"):
                    shape += f", {len(p['checkpointed_blocks'])} ckpt"
                for _ in range(2):
                    report = os.path.join(work, "report.json")
                    e = run([H, "execute", plan, "--steps", str(args.steps), "-o", report])
                    if e.returncode:
                        print(f"| {model} | {label} | {budget / 2**20:.1f} MiB | {shape} | execute: {' '.join(e.stderr.split())} | | | | |")
                        continue
                    r = json.load(open(report))
                    cal = r.get("calibration", {})
                    moved = 0.0
                    if "before" in cal and "after" in cal:
                        b, a = cal["before"]["runs"][0], cal["after"]["runs"][0]
                        compute = lambda x: (x["matmul_flops_per_s"] * x["conv_flops_per_s"]) ** 0.5
                        moved = max(abs(compute(a) / compute(b) - 1),
                                    abs(a["memory_bytes_per_s"] / b["memory_bytes_per_s"] - 1))
                    s = spread(r["step_seconds"])
                    error = r["errors"]["throughput_rel"]
                    print(f"| {model} | {label} | {budget / 2**20:.1f} MiB | {shape} | {r['predicted']['samples_per_second']:.2f} "
                          f"| {r['measured']['samples_per_second']:.2f} | {100 * error:+.1f}% | {100 * s:.1f}% | {100 * moved:.1f}% |",
                          flush=True)
                    if s < 0.05:
                        errors.append(error)
    if errors:
        magnitudes = [abs(e) for e in errors]
        print(f"\n{len(errors)} runs with a step spread under 5%: median |error| {100 * statistics.median(magnitudes):.1f}%, "
              f"largest {100 * max(magnitudes):.1f}%, {sum(m <= 0.15 for m in magnitudes)} within 15%")


if __name__ == "__main__":
    main()
