#!/usr/bin/python3
"""Both captures side by side: a model profiled from Python as TorchScript (capture="script") and as
its own forward in eager PyTorch (capture="eager"), each layer's kept, output and transient bytes
put beside each other (the largest difference as a share of the step's peak at that batch size), and
the plans both traces give at three budgets, with a third: the eager trace's bytes with the
TorchScript trace's times, which shows what of a difference in plans the bytes make and what the
times (TorchScript's interpreter from C++ against the Python forward) make. Each trace's timing
errors by size (what the planner takes plans closer than for a tie) are printed beside them.

  PYTHONPATH=build/default/python /usr/bin/python3 bench/capture_rows.py [--models resnet18,lm] [--batch 32]
                                                                       [--timing-seconds 10]
"""

import argparse
import copy
import json
import os
import sys
import tempfile

import headroom  # before torch: its thread pools then start as headroom's commands start them
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "python"))
import models  # noqa: E402
import planning  # noqa: E402
from finetune_rows import plan_shape  # noqa: E402  (this folder's)

FIELDS = ("kept_bytes", "output_bytes", "fwd_transient_bytes", "bwd_transient_bytes")
# Every byte count a trace's layer samples and steps hold (core/trace.h).
SAMPLE_BYTES = FIELDS + ("fwd_retained_bytes", "bwd_retained_bytes", "bwd_inputs_held_extra_bytes")
STEP_BYTES = ("peak_bytes", "static_bytes", "input_bytes", "optimizer_transient_bytes")
FRACTIONS = (0.5, 0.6, 0.8)


def profile_both(name, args):
    torch.manual_seed(0)
    model, _, make_batch, profile_args = models.build(name, args.image_size)
    inputs, _ = make_batch(2)
    sizes = planning.batch_sizes_up_to(args.batch)
    return {capture: headroom.profile(model, inputs, batch_sizes=sizes, repeats=3, threads=args.threads,
                                      timing_seconds=args.timing_seconds, capture=capture, **profile_args)
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


def eager_bytes_script_times(traces, folder):
    """The TorchScript trace with the eager trace's bytes (layers matched by name): planned, it differs
    from the TorchScript trace's plans only where the bytes do."""
    script, eager = traces["script"].to_dict(), traces["eager"].to_dict()
    hybrid = copy.deepcopy(script)
    # Sizes one profile located (a step in a layer's scratch memory) and the other did not are left out.
    common = set(script["batch_sizes"]) & set(eager["batch_sizes"])
    hybrid["batch_sizes"] = [b for b in hybrid["batch_sizes"] if b in common]
    hybrid["steps"] = [s for s in hybrid["steps"] if s["batch"] in common]
    for layer in hybrid["layers"]:
        layer["samples"] = [s for s in layer["samples"] if s["batch"] in common]
    eager_layers = {layer["name"]: layer for layer in eager["layers"]}
    for layer in hybrid["layers"]:
        measured = eager_layers[layer["name"]]
        if len(measured["saves_inputs"]) == len(layer["inputs"]):  # else the cuts read other inputs: the script's
            layer["saves_inputs"] = measured["saves_inputs"]
        layer.pop("keeps_output", None)
        if "keeps_output" in measured:
            layer["keeps_output"] = measured["keeps_output"]
        layer.pop("checkpointed", None)  # the eager capture estimates its checkpointed blocks
        by_batch = {s["batch"]: s for s in measured["samples"]}
        for sample in layer["samples"]:
            for field in SAMPLE_BYTES:
                if field in by_batch[sample["batch"]]:
                    sample[field] = by_batch[sample["batch"]][field]
    steps = {s["batch"]: s for s in eager["steps"]}
    for step in hybrid["steps"]:
        for field in STEP_BYTES:
            step[field] = steps[step["batch"]][field]
    hybrid["model_extra_bytes"] = eager["model_extra_bytes"]
    hybrid["optimizer"] = eager["optimizer"]
    path = os.path.join(folder, "eager-bytes-script-times.json")
    with open(path, "w") as f:
        json.dump(hybrid, f)
    return headroom.Trace.load(path)


def timing_errors(trace):
    """Each size's micro-batch median's relative standard error, as the planner resolves plans by."""
    return ", ".join(f"{s['batch']}: {100 * s['sequence'].get('micro_batch_error', 0):.1f}%" for s in trace.to_dict()["steps"])


def plan_rows(traces, batch):
    need = headroom.plan(traces["script"], budget="1TiB", batch=batch, strategies="none").predicted_peak_bytes
    rows = []
    for fraction in FRACTIONS:
        budget = int(fraction * need)
        row = [f"{int(100 * fraction)}% ({budget / 2**20:.1f} MiB)"]
        for capture in ("script", "eager", "hybrid"):
            try:
                p = headroom.plan(traces[capture], budget=budget, batch=batch)
                row.append(f"{plan_shape(p.micro_batches, len(p.checkpointed_blocks))}; "
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
    # The two profiles run one after the other on a machine whose speed wanders by 15-30% over
    # seconds to minutes (docs/results.md, "Timing over seconds"): rounds over more of it give each
    # trace the machine's usual speed, not the moment's.
    parser.add_argument("--timing-seconds", type=float, default=10)
    args = parser.parse_args()
    failed = False
    folder = tempfile.mkdtemp(prefix="headroom-captures-")
    for name in args.models.split(","):
        traces = profile_both(name, args)
        traces["hybrid"] = eager_bytes_script_times(traces, folder)
        rows, worst, largest = layer_rows(traces)
        print(f"\n### {name}: per layer at batch {largest} (script / eager)\n")
        print("| layer | kept | output | fwd transient | bwd transient |")
        print("|---|---|---|---|---|")
        for row in rows:
            if len(row) == 2:
                print(f"| {row[0]} | {row[1]} ||||")
            else:
                print(f"| {row[0]} | " + " | ".join(f"{a:,} / {b:,}" for a, b in row[1:]) + " |")
        print(f"\nlargest difference: {100 * worst[0]:.3f}% of the step's peak ({worst[1]})" if worst[1]
              else "\nlargest difference: none, every byte the same")
        failed |= worst[0] > 0.01
        for capture in ("script", "eager"):
            print(f"{capture} trace's micro_batch_error by size: " + timing_errors(traces[capture]))
        print("\n| budget | plan from the script trace | plan from the eager trace | eager bytes, script times |\n"
              "|---|---|---|---|")
        for row in plan_rows(traces, args.batch):
            print("| " + " | ".join(row) + " |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
