#!/usr/bin/env python3
"""Writes fuzz/seeds/trace/: small traces cut from the committed ones (traces/*.json), so the fuzzers
start from inputs of a few KB that still have blocks, skip edges, a loss reading the target and
Tempo profiles. The full traces are seeds too (scripts/fuzz.sh adds them); these keep executions
fast. Re-run after the trace schema changes:  python3 fuzz/make_seeds.py"""
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


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for name, blocks, batches in [("mlp", 2, 3), ("mlp", 1, 2), ("cnn", 2, 2), ("bert", 2, 3), ("gpt", 2, 2), ("bert", 1, 1)]:
        trace = json.loads((ROOT / "traces" / f"cpu-{name}.json").read_text())
        small = cut(trace, blocks, batches)
        path = OUT / f"{name}-{blocks}blocks-{batches}sizes.json"
        path.write_text(json.dumps(small, separators=(",", ":")) + "\n")
        print(path.relative_to(ROOT), path.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
