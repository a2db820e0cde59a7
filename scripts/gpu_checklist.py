#!/usr/bin/env python3
"""The GPU checklist in one run on the GPU machine: build against PyTorch's libtorch, profile the
zoo and a TorchScript model on CUDA, plan and execute at budgets that force checkpointing and
Tempo, every precision (fp16-autocast's loss scaling among them) on gpt small, L2L under
the step's static memory, Tempo's largest batch on bert large, then the test suite; within a
deadline.

  OUT=DIR python3 scripts/gpu_checklist.py [--deadline SECONDS] [--phases build,profile,...] [--dry-run]

Needs .gpu-deps (scripts/gpu-build.sh fetch, on the Debian machine); TARGETS and HEADROOM_WITH_NCCL
pass on to scripts/gpu-build.sh. Writes under OUT: build.log,
run.log (every command and its output), ctest.log, summary.md (the tables), results.tar.gz (the
traces, plans and reports). Each phase starts only with time left for it; the tables are written as
rows arrive, so a run cut short keeps what it measured.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("OUT") or os.path.join(ROOT, "gpu-out")
# Outside OUT: only a few files may come back from the GPU machine; they travel as one archive.
# build/ is ignored and stays on a warm machine between calls: a second call finds the traces.
WORK = os.environ.get("HEADROOM_GPU_WORK", os.path.join(ROOT, "build", "gpu-work"))
H = os.path.join(ROOT, "build", "gpu", "headroom")
DEVICE = "cuda"
RESNET = ("64", "16,32,64,128")  # the TorchScript example: image size, batch sizes
GIB = 1 << 30
START = time.monotonic()
DEADLINE = 450.0


def left():
    return DEADLINE - (time.monotonic() - START)


def log(text):
    with open(os.path.join(OUT, "run.log"), "a") as f:
        f.write(text + "\n")


def say(text):
    """To the reply's output tail and the summary."""
    print(text, flush=True)
    with open(os.path.join(OUT, "summary.md"), "a") as f:
        f.write(text + "\n")


def run(cmd, timeout, env=None, quiet=False):
    """Runs cmd (a list), logging it with its output; None when it did not start in time."""
    timeout = min(timeout, left() - 5)
    if timeout < 5:
        log(f"$ {' '.join(cmd)}\n(skipped: {left():.0f} s left)")
        return None
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        out, rc = r.stdout + r.stderr, r.returncode
    except OSError as e:
        out, rc = f"(could not run: {e})", 127
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += f"\n(timed out after {timeout:.0f} s)"
        rc = 124
    log(f"$ {' '.join(cmd)}\n(rc {rc}, {time.monotonic() - t0:.1f} s)\n{out}")
    if rc and not quiet:
        tail = out.strip().splitlines()[-3:] if out.strip() else []
        print(f"FAILED rc={rc}: {' '.join(cmd)[:160]} :: {' | '.join(tail)[:400]}", flush=True)
    return subprocess.CompletedProcess(cmd, rc, out, "")


def environment():
    for cmd in (["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"],
                [sys.executable, "-c", "import torch,torchvision;print('torch',torch.__version__,'cuda',torch.version.cuda,"
                 "'torchvision',torchvision.__version__)"],
                ["nproc"], ["bash", "-c", "g++ --version | head -1; cmake --version | head -1; nvcc --version | tail -1"]):
        r = run(cmd, 30, quiet=True)
        say(f"- `{' '.join(cmd)[:60]}`: {r.stdout.strip() if r else '?'}".replace("\n", "; "))


def build():
    log_path = os.path.join(OUT, "build.log")
    t0 = time.monotonic()
    env = dict(os.environ, KEEP_GOING="1")
    if not shutil.which("nvcc") and os.path.exists("/usr/local/cuda/bin/nvcc"):
        env["PATH"] = "/usr/local/cuda/bin:" + env["PATH"]
    with open(log_path, "w") as f:
        rc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-build.sh"), "build"], stdout=f,
                            stderr=subprocess.STDOUT, env=env, timeout=max(60, left() - 60)).returncode
    text = open(log_path).read()
    errors = [l for l in text.splitlines() if "error" in l.lower() and ("error:" in l or "Error" in l)]
    say(f"- build: rc {rc}, {time.monotonic() - t0:.0f} s, headroom {'built' if os.path.exists(H) else 'NOT built'}")
    for line in errors[:40]:
        print("  " + line[:300], flush=True)
    if not os.path.exists(H) and any("data_parallel.cpp" in l for l in errors):
        # NCCL's process group is what a single-GPU machine cannot exercise anyway: build without it.
        say("- build: data_parallel.cpp failed; again without NCCL")
        env["HEADROOM_WITH_NCCL"] = "OFF"
        with open(log_path, "a") as f:
            subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-build.sh"), "build"], stdout=f,
                           stderr=subprocess.STDOUT, env=env, timeout=max(60, left() - 60))
        say(f"- build without NCCL: headroom {'built' if os.path.exists(H) else 'NOT built'}")
    return os.path.exists(H)


PROFILES = [
    # (name, profile arguments, global batch for the plans)
    ("bert-base", ["--model", "bert", "--set", "preset=base", "--batch-sizes", "8,16,32,64"], 64),
    ("bert-large", ["--model", "bert", "--set", "preset=large", "--batch-sizes", "4,8,16,32"], 32),
    ("gpt-small", ["--model", "gpt", "--set", "preset=small", "--batch-sizes", "4,8,16,32"], 32),
    ("cnn", ["--model", "cnn", "--set", "image=64", "width=64", "blocks=2", "--batch-sizes", "32,64,128,256"], 256),
    ("resnet18", None, 128),
]


def profile_all():
    traces = {}
    failures = 0
    say("\n## Profiles on CUDA\n")
    for name, args, batch in PROFILES:
        trace = os.path.join(WORK, f"cuda-{name}.json")
        if os.path.exists(trace):
            os.remove(trace)  # a failed profile leaves no earlier call's trace for the later phases
        if args is None:
            export = run([sys.executable, os.path.join(ROOT, "examples", "export_torchvision.py"), "--models", "resnet18",
                          "--image-size", RESNET[0], "--out", WORK], 120)
            if not export or export.returncode:
                continue
            args = ["--torchscript", os.path.join(WORK, "resnet18.pt"), "--input", f"3x{RESNET[0]}x{RESNET[0]}:float32",
                    "--batch-sizes", RESNET[1]]
        t0 = time.monotonic()
        r = run([H, "profile", *args, "--device", DEVICE, "-o", trace], 150)
        if r is None:
            say(f"- {name}: not profiled (out of time)")
            continue
        if r.returncode == 0 and os.path.exists(trace):
            traces[name] = (trace, batch)
            say(f"- {name}: profiled in {time.monotonic() - t0:.0f} s (`headroom profile {' '.join(args)} --device cuda`)")
            print(r.stdout[-1500:], flush=True)
        else:
            say(f"- {name}: profile failed rc {r.returncode}: {r.stdout.strip()[-300:]}")
            failures += 1
            if failures == 2 and not traces:
                say("- two profiles failed and none succeeded: the rest skipped")
                break
    return traces


def existing_traces():
    traces = {}
    for name, _, batch in PROFILES:
        trace = os.path.join(WORK, f"cuda-{name}.json")
        if os.path.exists(trace):
            traces[name] = (trace, batch)
    return traces


def plan(trace, budget, batch, strategies, path):
    r = run([H, "plan", trace, "--budget", str(budget), "--batch", str(batch), "--strategies", strategies,
             "--margin", "0", "--no-rescale", "-o", path], 60, quiet=True)
    if r is None or r.returncode or not os.path.exists(path):
        return None
    return json.load(open(path))


def execute(plan_path, report_path, steps=6):
    r = run([H, "execute", plan_path, "--device", DEVICE, "--steps", str(steps), "--warmup", "3", "--no-rescale", "-o",
             report_path], 180)
    if r is None or r.returncode or not os.path.exists(report_path):
        return None
    return json.load(open(report_path))


def split_of(p):
    mb = p["micro_batches"]
    return f"{len(mb)}x{mb[0]}" if len(set(mb)) == 1 else "+".join(map(str, mb))


def plans_and_executions(traces):
    say("\n## Plans executed on CUDA (predicted against measured)\n")
    say("| trace | strategies | budget | plan | ckpt | tempo | peak pred | peak meas (alloc) | reserved | peak err "
        "| samples/s pred | meas | thr err |")
    say("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    order = ["bert-large", "gpt-small", "bert-base", "cnn", "resnet18"]
    for name in order:
        if name not in traces:
            continue
        trace, batch = traces[name]
        full_path = os.path.join(WORK, f"plan-{name}-full.json")
        full = plan(trace, "1TiB", batch, "none", full_path)
        if full is None:
            say(f"| {name} | none | 1TiB | plan failed | | | | | | | | | |")
            continue
        need = full["predicted"]["peak_bytes"]
        one = plan(trace, "1TiB", 1, "none", os.path.join(WORK, "probe.json"))
        static = one["predicted"]["peak_bytes"] if one else 0
        cases = [("none", 0, full, full_path)]
        # Budgets between the step's static memory and its whole need: what the techniques work on.
        for strategies, fraction in (("checkpoint", 0.6), ("tempo,checkpoint", 0.45), ("mbp,checkpoint,tempo", 0.25)):
            if "tempo" in strategies and name in ("cnn", "resnet18"):
                continue
            budget = int(static + (need - static) * fraction)
            path = os.path.join(WORK, f"plan-{name}-{strategies}.json")
            p = plan(trace, budget, batch, strategies, path)
            if p is None:
                say(f"| {name} | {strategies} | {budget / GIB:.2f} GiB | refused | | | | | | | | | |")
                continue
            cases.append((strategies, budget, p, path))
        for strategies, budget, p, plan_path in cases:
            if left() < 40:
                say(f"| {name} | {strategies} | (out of time) | | | | | | | | | | |")
                continue
            tag = strategies.replace(",", "+")
            rep = execute(plan_path, os.path.join(WORK, f"report-{name}-{tag}.json"))
            tempo = sum(1 for l in p["layers"] if l.get("variant") == "tempo")
            ckpt = len(p["checkpointed_blocks"])
            pp = p["predicted"]["peak_bytes"]
            ps = p["predicted"]["samples_per_second"]
            shown = f"{budget / GIB:.2f} GiB" if budget else "none"
            if rep is None:
                say(f"| {name} | {strategies} | {shown} | {split_of(p)} | {ckpt} | {tempo} | "
                    f"{pp / GIB:.3f} GiB | execute failed | | | {ps:.1f} | | |")
                continue
            mp = rep["measured"]["peak_bytes"]
            rs = rep["measured"].get("reserved_bytes", 0)
            ms = rep["measured"]["samples_per_second"]
            say(f"| {name} | {strategies} | {shown} | {split_of(p)} | {ckpt} | {tempo} | {pp / GIB:.3f} GiB "
                f"| {mp / GIB:.3f} GiB | {rs / GIB:.3f} GiB | {100 * (pp / mp - 1):+.2f}% | {ps:.1f} | {ms:.1f} "
                f"| {100 * (ps / ms - 1):+.1f}% |")


# fp16-autocast's step (dynamic loss scaling) runs only on CUDA: each precision profiled (one per
# process: on CUDA the caching allocator would keep one precision's memory reserved through the
# next), planned at 60% of its whole batch's need and executed; what the scaler skipped is in the
# report's warnings.
PRECISION_MODEL = ("gpt-small", ["--model", "gpt", "--set", "preset=small", "--batch-sizes", "4,8,16,32"], 32)
PRECISIONS = "fp32,bf16-autocast,fp16-autocast,bf16"


def precisions():
    name, args, batch = PRECISION_MODEL
    say(f"\n## Precisions on {DEVICE} ({name}, each of {PRECISIONS})\n")
    say("| precision | plain step ms at each size | workspace MiB | budget | plan | peak pred | peak meas | peak err "
        "| samples/s pred | meas | thr err | grad check | warnings |")
    say("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for precision in PRECISIONS.split(","):
        if left() < 60:
            say(f"| {precision} | | | (out of time) | | | | | | | | | |")
            continue
        trace = os.path.join(WORK, f"{DEVICE}-{name}-{precision}.json")
        r = run([H, "profile", *args, "--precision", precision, "--device", DEVICE, "-o", trace], 150)
        if r is None or r.returncode or not os.path.exists(trace):
            say(f"| {precision} | | | profile failed: {(r.stdout.strip()[-200:] if r else 'out of time')} | | | | | | | | | |")
            continue
        t = json.load(open(trace))
        # The plain steps are what plans predict from; the workspace is held beside the training state.
        about = (", ".join(f"{s['batch']}: {s['plain_step_ns'] / 1e6:.1f}" for s in t["steps"]) +
                 f" | {t.get('workspace_bytes', 0) / (1 << 20):.1f}")
        if precision == "fp32":  # the execute and l2l phases' trace of this model, this build's
            shutil.copyfile(trace, os.path.join(WORK, f"cuda-{name}.json"))
        whole = os.path.join(WORK, f"plan-precision-{precision}-whole.json")
        r = run([H, "plan", trace, "--budget", "1TiB", "--batch", str(batch), "--strategies", "none", "--margin", "0",
                 "--no-rescale", "-o", whole], 60, quiet=True)
        if r is None or r.returncode:
            say(f"| {precision} | {about} | plan failed | | | | | | | | | |")
            continue
        budget = int(json.load(open(whole))["predicted"]["peak_bytes"] * 0.6)
        path = os.path.join(WORK, f"plan-precision-{precision}.json")
        r = run([H, "plan", trace, "--budget", str(budget), "--batch", str(batch), "--no-rescale", "-o", path], 60,
                quiet=True)
        if r is None or r.returncode or not os.path.exists(path):
            say(f"| {precision} | {about} | {budget / GIB:.2f} GiB | refused | | | | | | | | |")
            continue
        p = json.load(open(path))
        rep = execute(path, os.path.join(WORK, f"report-precision-{precision}.json"))
        pp, ps = p["predicted"]["peak_bytes"], p["predicted"]["samples_per_second"]
        if rep is None:
            say(f"| {precision} | {about} | {budget / GIB:.2f} GiB | {split_of(p)} | {pp / GIB:.3f} GiB | execute failed | | {ps:.1f} | | | | |")
            continue
        mp, ms = rep["measured"]["peak_bytes"], rep["measured"]["samples_per_second"]
        scaling = [w for w in rep.get("warnings", []) if "loss scaling" in w]
        say(f"| {precision} | {about} | {budget / GIB:.2f} GiB | {split_of(p)} | {pp / GIB:.3f} GiB | {mp / GIB:.3f} GiB "
            f"| {100 * (pp / mp - 1):+.2f}% | {ps:.1f} | {ms:.1f} | {100 * (ps / ms - 1):+.1f}% | {grad_check(rep)} "
            f"| {'; '.join(scaling)} |")


def grad_check(report):
    check = report.get("gradient_check", {})
    return f"{check['max_rel_diff']:.2g}" if check.get("computed") else "-"


# L2L on CUDA (pinned host buffers, copy streams, the host optimizer): budgets under the
# step's static memory, where nothing but L2L fits; the device peak against the plan's, and
# the step's time.
L2L_FRACTIONS = (0.6, 0.35)


def l2l(traces):
    say(f"\n## L2L on {DEVICE} (budgets under the step's static memory)\n")
    say("| trace | budget | plan | l2l | peak pred | peak meas (alloc) | reserved | peak err | samples/s pred | meas "
        "| thr err | grad check |")
    say("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in ("gpt-small", "bert-large", "bert-base"):
        if name not in traces:
            continue
        trace, batch = traces[name]
        one = plan(trace, "1TiB", 1, "none", os.path.join(WORK, "probe.json"))
        if one is None:
            say(f"| {name} | plan failed | | | | | | | | | | |")
            continue
        static = one["predicted"]["peak_bytes"]
        for fraction in L2L_FRACTIONS:
            if left() < 60:
                say(f"| {name} | (out of time) | | | | | | | | | | |")
                return
            budget = int(static * fraction)
            path = os.path.join(WORK, f"plan-{name}-l2l-{fraction}.json")
            p = plan(trace, budget, batch, "all", path)
            if p is None:
                say(f"| {name} | {budget / GIB:.2f} GiB | refused | | | | | | | | | |")
                continue
            l2l = p.get("l2l")
            where = (f"boundaries on the {l2l['boundaries']}" + (f", from block {l2l['from_block']}"
                                                                    if "from_block" in l2l else "")) if l2l else "no l2l"
            rep = execute(path, os.path.join(WORK, f"report-{name}-l2l-{fraction}.json"), steps=4)
            pp, ps = p["predicted"]["peak_bytes"], p["predicted"]["samples_per_second"]
            if rep is None:
                say(f"| {name} | {budget / GIB:.2f} GiB | {split_of(p)} | {where} | {pp / GIB:.3f} GiB | execute failed "
                    f"| | | {ps:.1f} | | | |")
                continue
            mp, ms = rep["measured"]["peak_bytes"], rep["measured"]["samples_per_second"]
            rs = rep["measured"].get("reserved_bytes", 0)
            say(f"| {name} | {budget / GIB:.2f} GiB | {split_of(p)} | {where} | {pp / GIB:.3f} GiB | {mp / GIB:.3f} GiB "
                f"| {rs / GIB:.3f} GiB | {100 * (pp / mp - 1):+.2f}% | {ps:.1f} | {ms:.1f} | {100 * (ps / ms - 1):+.1f}% "
                f"| {grad_check(rep)} |")
            lanes = rep.get("l2l", {})
            if "measured_lanes" in lanes and "predicted_lanes" in lanes:
                pl, ml = lanes["predicted_lanes"], lanes["measured_lanes"]
                say(f"| | lanes s/step pred/meas: " + ", ".join(
                    f"{k[:-8]} {pl[k]:.4f}/{ml[k]:.4f}" for k in ("compute_seconds", "copy_seconds", "wait_seconds",
                                                                   "host_optimizer_seconds")) + " | | | | | | | | | | |")


def largest_batch(trace, budget, strategies):
    """The largest batch a plan fits in budget with these strategies (0 when none does)."""
    fits = lambda b: plan(trace, budget, b, strategies, os.path.join(WORK, "probe.json")) is not None
    low = 1
    if not fits(low):
        return 0
    high = 2
    while fits(high) and left() > 60:
        low, high = high, 2 * high
    while high - low > 1 and left() > 60:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


def tempo_largest_batch(traces):
    if "bert-large" not in traces:
        return
    trace, _ = traces["bert-large"]
    budget = 16 * GIB
    say(f"\n## Tempo on bert large: largest batch at a 16 GiB budget (one micro-batch)\n")
    say("| layers | largest batch | plan peak | samples/s pred | meas | peak meas |")
    say("|---|---|---|---|---|---|")
    for strategies, label in (("none", "standard"), ("tempo", "Tempo")):
        b = largest_batch(trace, budget, strategies)
        if b == 0:
            say(f"| {label} | none fits | | | | |")
            continue
        path = os.path.join(WORK, f"plan-bert-large-largest-{strategies}.json")
        p = plan(trace, budget, b, strategies, path)
        rep = execute(path, os.path.join(WORK, f"report-bert-large-largest-{strategies}.json"), steps=5) if p else None
        meas = f"{rep['measured']['samples_per_second']:.1f} | {rep['measured']['peak_bytes'] / GIB:.3f} GiB" if rep else "- | -"
        say(f"| {label} | {b} | {p['predicted']['peak_bytes'] / GIB:.3f} GiB | {p['predicted']['samples_per_second']:.1f} | {meas} |")


def tests():
    budget = left() - 15
    if budget < 30:
        say("\n- ctest: not run (out of time)")
        return
    t0 = time.monotonic()
    with open(os.path.join(OUT, "ctest.log"), "w") as f:
        try:
            subprocess.run(["ctest", "--test-dir", os.path.join(ROOT, "build", "gpu"), "-j", "8", "--timeout", "120",
                            "--output-on-failure"], stdout=f, stderr=subprocess.STDOUT, timeout=budget)
        except subprocess.TimeoutExpired:
            f.write(f"\n(ctest stopped after {budget:.0f} s)\n")
    text = open(os.path.join(OUT, "ctest.log")).read()
    lines = text.splitlines()
    summary = [l for l in lines if "tests passed" in l or "tests failed" in l]
    failed = [l for l in lines if "***Failed" in l or "(Failed)" in l or "***Timeout" in l or "Exception" in l]
    say(f"\n- ctest ({time.monotonic() - t0:.0f} s): {summary[-1] if summary else 'no summary (cut short)'}")
    for l in failed[:30]:
        say("  " + l.strip())


def symbolized(text):
    """segv_backtrace.so's frames with our objects' file and line (addr2line) and names demangled."""
    import re
    out = []
    for line in text.splitlines():
        m = re.match(r"^(/[^(]+)\(([^)]*)\)\[(0x[0-9a-f]+)\]$", line.strip())
        if not m:
            out.append(line)
            continue
        obj, where, _ = m.groups()
        if where.startswith("+"):
            r = subprocess.run(["addr2line", "-Cfpie", obj, where[1:]], capture_output=True, text=True)
            out.append(f"  {os.path.basename(obj)} {r.stdout.strip() or where}")
        else:
            name, _, offset = where.rpartition("+")
            r = subprocess.run(["c++filt", name], capture_output=True, text=True)
            out.append(f"  {os.path.basename(obj)} {(r.stdout.strip() or name)[:200]} +{offset}")
    return "\n".join(out)


def crashes():
    """What crashes torch 2.x builds on the way out (c10d's workers; bf16 on the CPU), run again with
    a stack printed where it happens; and which copies of nlohmann's JSON are in play."""
    say(f"\n## Crashes, with their stacks\n")
    so = os.path.join(WORK, "segv_backtrace.so")
    r = run(["cc", "-shared", "-fPIC", "-O1", "-o", so, os.path.join(ROOT, "scripts", "segv_backtrace.c"), "-ldl"], 60)
    if r is None or r.returncode:
        say("- segv_backtrace.so did not build")
        return
    torch_dir = subprocess.run([sys.executable, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
                               capture_output=True, text=True).stdout.strip()
    r = run(["bash", "-c",
             f"echo 'json.hpp under torch/include:'; find {torch_dir}/include -name json.hpp -path '*nlohmann*'; "
             f"echo \"ours: $(grep -m3 -h 'define NLOHMANN_JSON_VERSION_' {ROOT}/.gpu-deps/prefix/usr/include/nlohmann/detail/abi_macros.hpp "
             f"{ROOT}/.gpu-deps/prefix/usr/include/nlohmann/json.hpp 2>/dev/null | tr -s ' ' | tr '\\n' ' ')\"; "
             f"for f in {torch_dir}/lib/libtorch_cpu.so {torch_dir}/lib/libtorch.so {torch_dir}/lib/libc10.so; do "
             f"echo \"$f exports: $(nm -DC --defined-only $f 2>/dev/null | grep -o 'nlohmann::[a-z_0-9]*' | sort | uniq -c | tr -s ' ' | tr '\\n' ';')\"; done; "
             f"echo \"headroom-torch: $(nm -C {H}-torch 2>/dev/null | grep -o 'nlohmann::[a-z_0-9]*' | sort | uniq -c | tr -s ' ' | tr '\\n' ';')\"; "
             f"echo \"its dynamic nlohmann symbols: $(nm -DC {H}-torch 2>/dev/null | grep -c nlohmann)\"; "
             f"echo \"std::filesystem functions libtorch.so defines: $(nm -DC --defined-only {torch_dir}/lib/libtorch.so | grep -c 'std::filesystem')\"; "
             f"echo \"headroom-torch's libraries in order: $(readelf -d {H}-torch | grep NEEDED | grep -o '\\[.*\\]' | tr '\\n' ' ')\""], 60, quiet=True)
    say("```\n" + (r.stdout.strip() if r else "?") + "\n```")
    # Which object each of the program's std::filesystem calls reaches (bound at start-up).
    r = run(["bash", "-c", f"LD_BIND_NOW=1 LD_DEBUG=bindings {H}-torch --help 2>&1 >/dev/null | "
             "grep 'ZNSt10filesystem' | sed -e 's/^ *[0-9]*: *//' | "
             "awk '$3 ~ /headroom-torch$/ {print $6, $NF}' | sort | uniq -c | head -20"], 60, quiet=True)
    say("std::filesystem bindings of headroom-torch:\n```\n" + (r.stdout.strip() if r else "?") + "\n```")
    env = dict(os.environ, LD_PRELOAD=so)
    mlp = os.path.join(WORK, "crash-mlp")
    runs = [
        ("bf16 on the CPU: profile", [H, "profile", "--model", "mlp", "--device", "cpu", "--precision", "bf16",
                                      "--batch-sizes", "1,2,4,8,16", "--repeats", "1", "-o", mlp + "-bf16.json"]),
        ("bf16 on the CPU: plan", [H, "plan", mlp + "-bf16.json", "--budget", "1TiB", "--batch", "32", "--strategies",
                                   "none", "-o", mlp + "-bf16-plan.json"]),
        ("bf16 on the CPU: execute", [H, "execute", mlp + "-bf16-plan.json", "--steps", "2", "--warmup", "1", "-o",
                                      mlp + "-bf16-report.json"]),
        ("c10d: profile", [H, "profile", "--model", "mlp", "--set", "input=256", "hidden=512", "depth=4", "--optimizer",
                           "sgd", "--threads", "1", "--batch-sizes", "1,2,4,8,16", "--repeats", "2", "-o", mlp + "-dp.json"]),
        ("c10d: plan", [H, "plan", mlp + "-dp.json", "--budget", "1TiB", "--batch", "26", "--strategies", "mbp",
                        "--devices", "2", "--link", "1GB/s,20us", "-o", mlp + "-dp-plan.json"]),
        ("c10d: execute --devices 2", [H, "execute", mlp + "-dp-plan.json", "--devices", "2", "--steps", "2",
                                       "--warmup", "0", "-o", mlp + "-dp-report.json"]),
    ]
    for what, cmd in runs:
        r = run(cmd, 90, env=env, quiet=True)
        if r is None:
            say(f"- {what}: not run (out of time)")
            continue
        stacks = r.stdout[r.stdout.find("[segv_backtrace]"):] if "[segv_backtrace]" in r.stdout else ""
        say(f"- {what}: rc {r.returncode}" + (f"\n```\n{symbolized(stacks)[:6000]}\n```" if stacks else ""))


def archive():
    """The traces, plans and reports so far, as one file in OUT (kept current after every phase)."""
    with tarfile.open(os.path.join(OUT, "results.tar.gz"), "w:gz") as tar:
        for f in sorted(os.listdir(WORK)):
            if f.endswith(".json") and f != "probe.json":
                tar.add(os.path.join(WORK, f), arcname=f)


PHASES = ("build", "profile", "execute", "precision", "l2l", "tempo", "crashes", "test")


def main():
    global DEADLINE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deadline", type=float, default=450)
    ap.add_argument("--phases", default=",".join(PHASES),
                    help=f"comma-separated, run in this order: some of {','.join(PHASES)} (a later call on a warm "
                         "machine finds the build and the traces of an earlier one)")
    ap.add_argument("--models", default="", help="comma-separated subset of the profiled models (default: all)")
    ap.add_argument("--dry-run", action="store_true",
                    help="on the development machine: tiny models on the CPU with build/default, no build, no ctest")
    args = ap.parse_args()
    DEADLINE = args.deadline
    global H, DEVICE, PROFILES, RESNET, PRECISION_MODEL, PRECISIONS
    if args.dry_run:
        H, DEVICE = os.path.join(ROOT, "build", "default", "headroom"), "cpu"
        PROFILES = [("bert-large", ["--model", "bert", "--set", "preset=tiny", "--batch-sizes", "1,2"], 4),
                    ("cnn", ["--model", "cnn", "--batch-sizes", "2,4"], 8), ("resnet18", None, 4)]
        RESNET = ("32", "2,4")
        # fp16-autocast runs on CUDA only.
        PRECISION_MODEL = ("gpt-tiny", ["--model", "gpt", "--set", "preset=tiny", "--batch-sizes", "1,2"], 4)
        PRECISIONS = "fp32,bf16-autocast,bf16"
    if args.models:
        wanted = args.models.split(",")
        known = [name for name, _, _ in PROFILES]
        if any(m not in known for m in wanted):
            sys.exit(f"gpu_checklist.py: --models: expected some of {','.join(known)}")
        PROFILES = [p for p in PROFILES if p[0] in wanted]
    os.makedirs(WORK, exist_ok=True)
    say(f"# GPU checklist, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    try:
        environment()
        phases = args.phases.split(",")
        unknown = set(phases) - set(PHASES)
        if unknown:
            sys.exit(f"gpu_checklist.py: unknown phase {sorted(unknown)[0]}")
        if args.dry_run:
            phases = [p for p in phases if p not in ("build", "test")]
        if "build" in phases and not build():
            return
        if not os.path.exists(H):
            say(f"- no {H}: run the build phase first")
            return
        # In the order given: a later phase finds the traces an earlier one wrote (precision's fp32
        # profile serves execute and l2l where profile did not run).
        for phase in phases:
            if phase == "profile":
                profile_all()
            elif phase in ("execute", "l2l", "tempo"):
                traces = existing_traces()
                {"execute": plans_and_executions, "l2l": l2l, "tempo": tempo_largest_batch}[phase](traces)
            elif phase == "precision":
                precisions()
            elif phase == "crashes":
                crashes()
            elif phase == "test":
                tests()
            archive()
    finally:
        archive()
        say(f"\n(checklist took {time.monotonic() - START:.0f} s)")


if __name__ == "__main__":
    main()
