#!/usr/bin/env python3
"""Writes fuzz/seeds/trace/ and fuzz/seeds/planner/. The trace seeds are small traces cut from the committed ones (traces/*.json), so the fuzzers
start from inputs of a few KB that still have blocks, skip edges, a loss reading the target and
Tempo profiles. The full traces are seeds too (scripts/fuzz.sh adds them); these keep executions
fast. The planner seeds are the small mlp trace with fields at the reader's limits (the inputs that
found overflows), behind the 4 request bytes of fuzz/planner_fuzz.cpp.
Re-run after the trace schema changes:  python3 fuzz/make_seeds.py"""
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fuzz" / "seeds" / "trace"


def cut(trace, keep_blocks, keep_batches):
    """Keeps layers outside blocks and in the first keep_blocks blocks, and the first keep_batches sizes."""
    layers = trace["layers"]
    kept = [l["id"] for l in layers if l["block"] < keep_blocks]
    new_id = {old: new for new, old in enumerate(kept)}

    def remap(i):
        if i < 0:
            return i
        while i not in new_id:  # an input from a dropped layer reads the last kept layer before it
            i -= 1
            if i < 0:
                return -1
        return new_id[i]

    out = dict(trace)
    out["batch_sizes"] = trace["batch_sizes"][:keep_batches]
    out["steps"] = trace["steps"][:keep_batches]
    if "tempo_steps" in trace:
        out["tempo_steps"] = trace["tempo_steps"][:keep_batches]
    out["layers"] = []
    for old in kept:
        layer = dict(layers[old])
        layer["id"] = new_id[old]
        layer["inputs"] = [remap(i) for i in layer["inputs"]]
        layer["samples"] = layer["samples"][:keep_batches]
        if "tempo" in layer:
            layer["tempo"] = dict(layer["tempo"], samples=layer["tempo"]["samples"][:keep_batches])
        out["layers"].append(layer)
    return out


MAX_BYTES = 1 << 44
MAX_NS = 1 << 44


def at_limits(trace, variant):
    """The trace with its largest sample at the limits (a steep last segment to extend)."""
    t = json.loads(json.dumps(trace))
    for layer in t["layers"]:
        samples = layer["samples"][-1:]
        for s in samples:
            if variant == "bytes":
                s.update(kept_bytes=MAX_BYTES, output_bytes=MAX_BYTES, fwd_retained_bytes=MAX_BYTES,
                         bwd_retained_bytes=-MAX_BYTES)
            elif variant == "times":
                s.update(fwd_ns=MAX_NS, bwd_ns=0)
            elif variant == "zero-times":
                s.update(fwd_ns=0, bwd_ns=0)
        if variant == "bytes":
            layer["param_bytes"] = MAX_BYTES
    for step in t["steps"]:
        if variant == "times":
            step["step_ns"] = MAX_NS
        if variant == "zero-times":
            step["optimizer_ns"] = 0
    return t


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for name, blocks, batches in [("mlp", 2, 3), ("mlp", 1, 2), ("cnn", 2, 2), ("bert", 2, 3), ("gpt", 2, 2), ("bert", 1, 1)]:
        trace = json.loads((ROOT / "traces" / f"cpu-{name}.json").read_text())
        small = cut(trace, blocks, batches)
        path = OUT / f"{name}-{blocks}blocks-{batches}sizes.json"
        path.write_text(json.dumps(small, separators=(",", ":")) + "\n")
        print(path.relative_to(ROOT), path.stat().st_size, "bytes")
    planner = ROOT / "fuzz" / "seeds" / "planner"
    planner.mkdir(parents=True, exist_ok=True)
    small = json.loads((OUT / "mlp-2blocks-3sizes.json").read_text())
    # budget 0x1000/16384 of the reference, batch 64, mbp+checkpoint; and a tight budget with all strategies
    for variant in ["bytes", "times", "zero-times"]:
        for request in [b"\x00\x10\x3f\x03", b"\x00\x40\x20\x07"]:
            path = planner / f"mlp-{variant}-{request.hex()}"
            path.write_bytes(request + json.dumps(at_limits(small, variant), separators=(",", ":")).encode() + b"\n")
            print(path.relative_to(ROOT), path.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
