#!/usr/bin/env python3
"""torchvision's classifiers as torchvision builds them, through headroom: one Markdown row per model.

Each model is exported unmodified (examples/export_classifiers.py: torch.jit.script, nothing else),
profiled at the default depth (the time it takes and the layers found), planned at 60% of its whole
batch's need at batch 32 (the need: `plan --strategies none` at an unbounded budget), and executed
under that budget: predicted and measured peak, signed (above 0: predicted over), the plan, and the
executor's gradient check against the full batch.

  python3 bench/any_model_rows.py [--headroom build/default/headroom] [--models a,b] [--image-size 64]
      [--batch-sizes 2,4,8,16,32] [--steps 2]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

MODELS = ["resnet18", "shufflenet_v2_x0_5", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny",
          "densenet121", "vgg11", "alexnet", "regnet_y_400mf", "squeezenet1_0"]


def run(command):
    return subprocess.run(command, capture_output=True, text=True)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", default=os.path.join(root, "build/default/headroom"))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-sizes", default="2,4,8,16,32")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    H = args.headroom
    work = tempfile.mkdtemp(prefix="headroom-any-model-")
    exported = run(["/usr/bin/python3", os.path.join(root, "examples/export_classifiers.py"), "--models", args.models,
                    "--image-size", str(args.image_size), "--out", work])
    if exported.returncode:
        sys.exit(f"export failed: {exported.stderr.strip()}")
    spec = f"3x{args.image_size}x{args.image_size}:float32"
    print("| model | layers (blocks) | profile s | whole batch needs | budget (60%) | plan | predicted peak | measured peak "
          "| peak error | gradient check | status |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        model = os.path.join(work, name + ".pt")
        trace = os.path.join(work, name + "-trace.json")
        started = time.monotonic()
        p = run([H, "profile", "--torchscript", model, "--input", spec, "--batch-sizes", args.batch_sizes,
                 "--repeats", "1", "-o", trace])
        seconds = time.monotonic() - started
        if p.returncode:
            print(f"| {name} | | | | | | | | | | profile failed: {(p.stderr.strip().splitlines() or ['?'])[-1]} |", flush=True)
            continue
        t = json.load(open(trace))
        layers = len(t["layers"]) - 1  # less the loss headroom adds
        blocks = len({layer["block"] for layer in t["layers"] if layer.get("block", -1) >= 0})
        whole = os.path.join(work, name + "-whole.json")
        w = run([H, "plan", trace, "--budget", "1TiB", "--batch", str(args.batch), "--strategies", "none", "-o", whole])
        if w.returncode:
            print(f"| {name} | {layers} ({blocks}) | {seconds:.1f} | | | | | | | | plan failed: {' '.join(w.stderr.split())} |")
            continue
        need = json.load(open(whole))["predicted"]["peak_bytes"]
        budget = int(0.6 * need)
        plan = os.path.join(work, name + "-plan.json")
        q = run([H, "plan", trace, "--budget", str(budget), "--batch", str(args.batch), "-o", plan])
        least = ""
        if q.returncode:
            # 60% is below what the parameters, gradients and optimizer state take with the least
            # activations: the smallest budget the planner finds, plus 5%, instead (and the row says so).
            smallest = None
            for line in q.stderr.splitlines():
                if "the budget must be at least" in line:
                    smallest = line.rsplit("at least", 1)[1].strip()
            if smallest:
                budget_text = smallest.split()[0] + smallest.split()[1] if len(smallest.split()) > 1 else smallest
                q = run([H, "plan", trace, "--budget", budget_text, "--batch", str(args.batch), "-o", plan])
                if not q.returncode:
                    budget = json.load(open(plan))["budget_bytes"]
                    least = " (60% is below the training state; the least budget)"
        if q.returncode:
            print(f"| {name} | {layers} ({blocks}) | {seconds:.1f} | {need / 2**20:.1f} MiB | {budget / 2**20:.1f} MiB | | | | | | "
                  f"plan: {' '.join(q.stderr.split())} |", flush=True)
            continue
        choice = json.load(open(plan))
        mb = choice["micro_batches"]
        shape = f"{len(mb)}x{mb[0]}" + ("*" if len(set(mb)) > 1 else "")
        ckpt = choice.get("checkpointed_blocks", [])
        if ckpt:
            shape += f", {len(ckpt)} ckpt"
        report = os.path.join(work, name + "-report.json")
        # BatchNorm on running statistics: the gradient check then compares the same function.
        e = run([H, "execute", plan, "--steps", str(args.steps), "--batchnorm-eval", "-o", report])
        if e.returncode:
            print(f"| {name} | {layers} ({blocks}) | {seconds:.1f} | {need / 2**20:.1f} MiB | {budget / 2**20:.1f} MiB | {shape} "
                  f"| | | | | execute: {e.stderr.strip().splitlines()[-1] if e.stderr.strip() else e.returncode} |", flush=True)
            continue
        r = json.load(open(report))
        predicted = r["predicted"]["peak_bytes"]
        measured = r["measured"]["peak_bytes"]
        check = r.get("gradient_check", {})
        grad = f"{check['max_rel_diff']:.1e}" if check.get("computed") else "-"
        print(f"| {name} | {layers} ({blocks}) | {seconds:.1f} | {need / 2**20:.1f} MiB | {budget / 2**20:.1f} MiB | {shape} "
              f"| {predicted:,} | {measured:,} | {100 * (predicted - measured) / measured:+.2f}% | {grad} | {r['status']}{least} |",
              flush=True)


if __name__ == "__main__":
    main()
