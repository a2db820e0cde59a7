#!/usr/bin/env python3
"""Predicted against measured step time as a user meets it, with the commands of docs/results.md's "Time on the machine at hand" table.

Each row plans, then executes the plan twice with `headroom execute`, and prints one Markdown row:
the predicted and measured seconds a step, the signed error on the step time (above 0: predicted
too slow), the threads the report says ran, and any calibration line `plan` or `execute` printed.

  python3 bench/time_rows.py [--headroom build/default/headroom] [ROW ...]

Rows: gpt gptfresh l2l l2lfresh r18t2 r18 r18t1 r18torch mlpbusy committed (default: all); r18torch
is plain PyTorch on the same resnet18 step at 1 and 2 threads, in glibc's default malloc regime and
in headroom's. The resnet18 rows
need the examples' export: python3 examples/export_torchvision.py --models resnet18 --image-size 64
--out /tmp/r18 (or --resnet18 PATH). Run from the repository root on an otherwise idle machine;
mlpbusy keeps one core busy while it profiles, on purpose.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROWS = ["gpt", "gptfresh", "l2l", "l2lfresh", "r18t2", "r18", "r18t1", "r18torch", "mlpbusy", "committed"]
# headroom's host-memory regime, as glibc's environment sets it: without it a PyTorch process hands
# every large buffer back to the kernel and faults it in again on the next call (2.5x on resnet18).
HEADROOM_REGIME = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
L2L = ["--strategies", "mbp,checkpoint,tempo,l2l"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--headroom", default="build/default/headroom")
    ap.add_argument("--resnet18", default="/tmp/r18/resnet18.pt")
    ap.add_argument("rows", nargs="*", default=ROWS)
    args = ap.parse_args()
    unknown = [r for r in args.rows if r not in ROWS]
    if unknown:
        sys.exit(f"time_rows.py: unknown row {unknown[0]} (known: {', '.join(ROWS)})")
    if not os.path.exists(args.headroom):
        sys.exit(f"time_rows.py: {args.headroom} not found (build first, or pass --headroom)")
    work = tempfile.mkdtemp(prefix="headroom-time-rows.")
    H = args.headroom

    def run(cmd):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            print(f"FAILED: {' '.join(cmd)}: {r.stderr.strip()[-300:]}", flush=True)
        return r

    def calibration_lines(text):
        return [l.strip() for l in text.splitlines() if "as fast as" in l]

    def plan_and_execute(label, trace, plan_args, steps, exec_args=()):
        plan_path = os.path.join(work, "plan.json")
        p = run([H, "plan", trace, *plan_args, "-o", plan_path])
        if p.returncode:
            return
        said = calibration_lines(p.stdout + p.stderr)
        plan = json.load(open(plan_path))
        runs = []
        for k in range(2):
            report_path = os.path.join(work, f"report{k}.json")
            e = run([H, "execute", plan_path, "--steps", str(steps), *exec_args, "-o", report_path])
            if e.returncode:
                return
            said += [l for l in calibration_lines(e.stdout + e.stderr) if l not in said]
            r = json.load(open(report_path))
            runs.append((r["predicted"]["step_seconds"], r["measured"]["step_seconds"], r["threads"]))
        mb = plan["micro_batches"]
        split = f"{len(mb)}x{mb[0]}" if len(set(mb)) == 1 else "+".join(map(str, mb))
        print(f"| {label} | {split} | {' / '.join(f'{p:.4f}' for p, _, _ in runs)} | "
              f"{', '.join(f'{m:.4f}' for _, m, _ in runs)} | "
              f"{', '.join(f'{100 * (p / m - 1):+.1f}%' for p, m, _ in runs)} | {runs[0][2]} | {'; '.join(said) or '-'} |",
              flush=True)

    def training_state_60(trace):
        t = json.load(open(trace))
        state = 4 * sum(l["param_bytes"] for l in t["layers"]) + t.get("model_extra_bytes", 0)
        return str(int(0.6 * state))

    fresh_gpt = os.path.join(work, "gpt-fresh.json")

    def ensure_fresh_gpt():
        if not os.path.exists(fresh_gpt):
            run([H, "profile", "--model", "gpt", "--set", "preset=tiny", "--batch-sizes", "1,2,4,8,16", "-o", fresh_gpt])

    print("| row | plan | predicted s/step | measured s/step | error (signed) | threads | calibration said |")
    print("|---|---|---|---|---|---|---|")
    for row in args.rows:
        if row == "gpt":
            plan_and_execute("committed gpt, 200 MiB", "traces/cpu-gpt.json", ["--budget", "200MiB", "--batch", "32"], 6)
        elif row == "gptfresh":
            ensure_fresh_gpt()
            plan_and_execute("gpt afresh, 200 MiB", fresh_gpt, ["--budget", "200MiB", "--batch", "32"], 6)
        elif row == "l2l":
            for m in ("bert", "gpt"):
                t = f"traces/cpu-{m}.json"
                plan_and_execute(f"committed {m}, L2L at 60%", t, ["--budget", training_state_60(t), "--batch", "32", *L2L], 3)
        elif row == "l2lfresh":
            ensure_fresh_gpt()
            plan_and_execute("gpt afresh, L2L at 60%", fresh_gpt,
                             ["--budget", training_state_60(fresh_gpt), "--batch", "32", *L2L], 3)
        elif row in ("r18t2", "r18", "r18t1"):
            if not os.path.exists(args.resnet18):
                print(f"| resnet18 ({row}) | skipped: {args.resnet18} not found |", flush=True)
                continue
            threads = {"r18t2": ["--threads", "2"], "r18": [], "r18t1": ["--threads", "1"]}[row]
            t = os.path.join(work, f"{row}.json")
            run([H, "profile", "--torchscript", args.resnet18, "--input", "3x64x64:float32", "--optimizer", "sgd",
                 "--batch-sizes", "1,2,4,8,16", *threads, "-o", t])
            plan_and_execute(f"resnet18 profiled {' '.join(threads) or 'at the default threads'}", t,
                             ["--budget", "1TiB", "--batch", "16", "--strategies", "none"], 5)
        elif row == "r18torch":
            if not os.path.exists(args.resnet18):
                print(f"| plain PyTorch, resnet18 | skipped: {args.resnet18} not found |", flush=True)
                continue
            step = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "pytorch_step.py")
            for regime, extra in (("glibc's default regime", {}), ("headroom's regime", HEADROOM_REGIME)):
                for threads in (1, 2):
                    r = subprocess.run([sys.executable, step, "loop", "--model", args.resnet18, "--input", "3x64x64:float32",
                                        "--batch", "16", "--steps", "8", "--optimizer", "sgd", "--threads", str(threads)],
                                       capture_output=True, text=True, env=dict(os.environ, **extra))
                    if r.returncode:
                        print(f"FAILED: pytorch_step.py: {r.stderr.strip()[-300:]}", flush=True)
                        continue
                    median = json.loads(r.stdout)["median_step_seconds"]
                    print(f"| plain PyTorch, resnet18, {regime} | 1x16 | - | {median:.4f} | - | {threads} | - |", flush=True)
        elif row == "mlpbusy":
            t = os.path.join(work, "mlp-busy.json")
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                run([H, "profile", "--model", "mlp", "--set", "depth=6", "--batch-sizes", "8,16,32,64", "-o", t])
            finally:
                busy.kill()
            whole = ["--budget", "1TiB", "--batch", "64", "--strategies", "none"]
            plan_and_execute("mlp depth 6 profiled busy, executed quiet", t, whole, 10)
            plan_and_execute("the same, --no-rescale", t, whole, 10, exec_args=["--no-rescale"])
        elif row == "committed":
            for name, batch in [("cpu-mlp", 64), ("cpu-cnn", 64), ("cpu-bert", 32), ("cpu-gpt", 32), ("cpu-clip", 16384),
                                ("cpu-bert-large", 8)]:
                t = f"traces/{name}.json"
                whole = os.path.join(work, "whole.json")
                if run([H, "plan", t, "--budget", "1TiB", "--batch", str(batch), "--strategies", "none", "-o", whole]).returncode:
                    continue
                need = json.load(open(whole))["predicted"]["peak_bytes"]
                plan_and_execute(f"{name} at 60% of its batch of {batch}'s need", t,
                                 ["--budget", str(int(0.6 * need)), "--batch", str(batch)], 5)


if __name__ == "__main__":
    main()
