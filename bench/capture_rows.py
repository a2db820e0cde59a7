#!/usr/bin/python3
"""Both captures side by side: a model profiled from Python as TorchScript (capture="script") and as
its own forward in eager PyTorch (capture="eager"), each layer's kept, output and transient bytes
put beside each other (the largest difference as a share of the step's peak at that batch size), and
the plans both traces give at three budgets.

  PYTHONPATH=build/default/python /usr/bin/python3 bench/capture_rows.py [--models resnet18,lm] [--batch 32]
"""

import argparse
import os
import sys

import headroom  # before torch: its thread pools then start as headroom's commands start them
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "python"))
import models  # noqa: E402

FIELDS = ("kept_bytes", "output_bytes", "fwd_transient_bytes", "bwd_transient_bytes")
FRACTIONS = (0.5, 0.6, 0.8)


def profile_both(name, args):
    torch.manual_seed(0)
    model, _, make_batch, profile_args = models.build(name, args.image_size)
    inputs, _ = make_batch(2)
    sizes = [b for b in (1, 2, 4, 8, 16, 32) if b <= args.batch]
    return {capture: headroom.profile(model, inputs, batch_sizes=sizes, repeats=3, threads=args.threads,
                                      capture=capture, **profile_args)
            for capture in ("script", "eager")}


def layer_rows(traces):
    """(rows per layer at the largest size, the largest difference as a share of the step's peak)."""
    documents = {c: t.to_dict() for c, t in traces.items()}
    peaks = {s["batch"]: s["peak_bytes"] for s in documents["script"]["steps"]}
    by_name = {c: {layer["name"]: layer for layer in d["layers"]} for c, d in documents.items()}
    rows, worst = [], (0.0, "")
    names = [layer["name"] for layer in documents["script"]["layers"]]
    names += [n for n in by_name["eager"] if n not in by_name["script"]]
    largest = max(peaks)
    for name in names:
        script, eager = by_name["script"].get(name), by_name["eager"].get(name)
        if script is None or eager is None:
            rows.append((name, "script only" if eager is None else "eager only"))
            continue
        samples = {c: {s["batch"]: s for s in layer["samples"]} for c, layer in (("script", script), ("eager", eager))}
        for batch, peak in peaks.items():
            for field in FIELDS:
                a, b = samples["script"][batch][field], samples["eager"][batch][field]
                share = abs(a - b) / peak
                if share > worst[0]:
                    worst = (share, f"{name} {field} at batch {batch}")
        rows.append((name, *[(samples["script"][largest][f], samples["eager"][largest][f]) for f in FIELDS]))
    return rows, worst, largest


def plan_rows(traces, batch):
    need = headroom.plan(traces["script"], budget="1TiB", batch=batch, strategies="none").predicted_peak_bytes
    rows = []
    for fraction in FRACTIONS:
        budget = int(fraction * need)
        row = [f"{int(100 * fraction)}% ({budget / 2**20:.1f} MiB)"]
        for capture in ("script", "eager"):
            try:
                p = headroom.plan(traces[capture], budget=budget, batch=batch)
                checkpointed = len(p.checkpointed_blocks)
                row.append(f"{'+'.join(str(b) for b in p.micro_batches)}{f', {checkpointed} ckpt' if checkpointed else ''}; "
                           f"{p.predicted_peak_bytes / 2**20:.2f} MiB, {p.predicted_samples_per_second:.1f}/s")
            except headroom.Infeasible:
                row.append("infeasible")
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,lm")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    failed = False
    for name in args.models.split(","):
        traces = profile_both(name, args)
        rows, worst, largest = layer_rows(traces)
        print(f"\n### {name}: per layer at batch {largest} (script / eager)\n")
        print("| layer | kept | output | fwd transient | bwd transient |")
        print("|---|---|---|---|---|")
        for row in rows:
            if len(row) == 2:
                print(f"| {row[0]} | {row[1]} ||||")
            else:
                print(f"| {row[0]} | " + " | ".join(f"{a:,} / {b:,}" for a, b in row[1:]) + " |")
        print(f"\nlargest difference: {100 * worst[0]:.3f}% of the step's peak ({worst[1]})")
        failed |= worst[0] > 0.01
        print(f"\n| budget | plan from the script trace | plan from the eager trace |\n|---|---|---|")
        for row in plan_rows(traces, args.batch):
            print("| " + " | ".join(row) + " |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
