#!/usr/bin/env python3
"""bert-base's activation bytes per token per encoder layer, measured, beside Korthikanti et al. 2022.

"Reducing Activation Recomputation in Large Transformer Models" counts what one transformer layer
stores for backward in 16-bit training as 34·s·b·h + 5·a·s²·b bytes (s sequence, b batch, h hidden,
a heads; dropout masks one byte each). headroom measures what each layer keeps for backward with the
allocator hook. This profiles the zoo's bert at base size (hidden 768, 12 heads; three encoder layers,
enough for a middle one) at two batch sizes, takes each layer's kept bytes of the middle encoder layer
per added sample (so the weights' casts, which do not grow with the batch, drop out) per token, and
prints them term by term beside the formula's terms, attributed as headroom attributes bytes: to the
layer that allocated them.

  python3 bench/activation_formula.py [--headroom build/default/headroom] [--seqs 128,512]
      [--precisions fp32,bf16-autocast,bf16]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HIDDEN, HEADS = 768, 12
# The formula's terms by the layer that allocates them, in units of s·b·h bytes (16-bit), and the
# attention scores' terms in units of a·s²·b bytes.
TERMS = {
    "qkv": (0, 0, "its output is read by attention's head copies, not kept"),
    "attention": (8, 5, "Q, K (4sbh), V (2sbh), output projection's input (2sbh); softmax 2as²b, "
                        "its dropout mask as²b and output 2as²b"),
    "attn_out": (0, 0, ""),
    "attn_dropout": (1, 0, "dropout mask sbh"),
    "attn_residual": (2, 0, "LayerNorm's input 2sbh"),
    "attn_ln": (2, 0, "first MLP linear's input 2sbh"),
    "ffn_in": (8, 0, "GELU's input 8sbh"),
    "gelu": (8, 0, "second MLP linear's input 8sbh"),
    "ffn_out": (0, 0, ""),
    "ffn_dropout": (1, 0, "dropout mask sbh"),
    "ffn_residual": (2, 0, "LayerNorm's input 2sbh"),
    "ffn_ln": (2, 0, "the next layer's QKV input 2sbh"),
}


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", default=os.path.join(root, "build/default/headroom"))
    parser.add_argument("--seqs", default="128,512")
    parser.add_argument("--precisions", default="fp32,bf16-autocast,bf16")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="headroom-formula-")
    precisions = args.precisions.split(",")
    for seq in [int(s) for s in args.seqs.split(",")]:
        measured = {}
        for precision in precisions:
            trace = os.path.join(work, f"bert-{seq}-{precision}.json")
            p = subprocess.run([args.headroom, "profile", "--model", "bert", "--set", "preset=base", "--set", "layers=3",
                                "--set", f"seq={seq}", "--batch-sizes", "1,2", "--repeats", "1", "--no-tempo",
                                "--precision", precision, "-o", trace], capture_output=True, text=True)
            if p.returncode:
                print(f"profile bert seq {seq} {precision}: {p.stderr.strip().splitlines()[-1]}", file=sys.stderr)
                return 1
            t = json.load(open(trace))
            for layer in t["layers"]:
                if layer["block"] != 1:
                    continue
                key = layer["name"].split(".", 1)[1]
                per_sample = layer["samples"][1]["kept_bytes"] - layer["samples"][0]["kept_bytes"]
                measured.setdefault(key, {})[precision] = per_sample / seq
        print(f"\nbert-base (h {HIDDEN}, a {HEADS}), seq {seq}: bytes per token kept by each layer of an encoder layer\n")
        print("| layer | Korthikanti (16-bit) | " + " | ".join(precisions) + " | the formula's terms |")
        print("|---|---|" + "---|" * len(precisions) + "---|")
        totals = {p: 0.0 for p in precisions}
        formula_total = 0.0
        for key, (sbh, as2b, what) in TERMS.items():
            formula = sbh * HIDDEN + as2b * HEADS * seq  # per token: divide s·b out
            formula_total += formula
            cells = []
            for p in precisions:
                value = measured.get(key, {}).get(p)
                totals[p] += value or 0
                cells.append("" if value is None else f"{value:,.0f}")
            print(f"| {key} | {formula:,.0f} | " + " | ".join(cells) + f" | {what} |")
        print(f"| **layer** | **{formula_total:,.0f}** | " + " | ".join(f"**{totals[p]:,.0f}**" for p in precisions)
              + " | 34·h + 5·a·s |")
        print("| measured / formula | | " + " | ".join(f"{totals[p] / formula_total:.2f}" for p in precisions) + " | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
