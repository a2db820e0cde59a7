#!/usr/bin/python3
"""Exports a decoder-only language model written as an ordinary nn.Module, for `headroom profile --torchscript`.

The model is what a user writes (nanoGPT's shape): token and position embeddings, a ModuleList of blocks that
each add attention and an MLP to their own residual stream, a final LayerNorm and a head. Its forward takes
two inputs, the token ids and an attention mask (1 for a token, 0 for padding), and returns the logits. It is
passed to `torch.jit.script` as it is and saved; next to NAME.pt goes NAME.json with the inputs and the
`headroom profile` line to run next (at --depth 2: the blocks are the layers).

  python3 examples/export_language_model.py --out /tmp/lm
  python3 examples/export_language_model.py --layers 2 --hidden 128 --seq 64 --out /tmp/lm-small
"""

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PROG = "export_language_model.py"
torch = common.require_torch(PROG)
nn = torch.nn


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden, heads, context, dropout):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.register_buffer("causal", torch.tril(torch.ones(context, context, dtype=torch.bool)).view(1, 1, context, context))

    def forward(self, x, mask):
        batch, length, hidden = x.shape
        q, k, v = self.qkv(x).split(hidden, dim=2)
        q = q.view(batch, length, self.heads, hidden // self.heads).transpose(1, 2)
        k = k.view(batch, length, self.heads, hidden // self.heads).transpose(1, 2)
        v = v.view(batch, length, self.heads, hidden // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        scores = scores.masked_fill(~self.causal[:, :, :length, :length], float("-inf")) + mask
        weights = self.attn_dropout(torch.softmax(scores, dim=-1))
        y = (weights @ v).transpose(1, 2).contiguous().view(batch, length, hidden)
        return self.resid_dropout(self.proj(y))


class Block(nn.Module):
    def __init__(self, hidden, heads, context, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads, context, dropout)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden), nn.Dropout(dropout))

    def forward(self, x, mask):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class LanguageModel(nn.Module):
    def __init__(self, vocab, hidden, heads, layers, context, dropout):
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(context, hidden)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(hidden, heads, context, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids, mask):
        length = ids.size(1)
        positions = torch.arange(length, device=ids.device)
        x = self.dropout(self.tokens(ids) + self.positions(positions))
        # Padding is masked out of every query's keys: 0 where a token is, a large negative where padding is.
        extended = (1.0 - mask.to(x.dtype))[:, None, None, :] * -10000.0
        for block in self.blocks:
            x = block(x, extended)
        return self.head(self.ln_f(x))


def main():
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=1000, help="vocabulary size (default 1000)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size (default 256)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    parser.add_argument("--layers", type=int, default=4, help="blocks (default 4)")
    parser.add_argument("--seq", type=int, default=128, help="sequence length, also the context (default 128)")
    parser.add_argument("--dropout", type=float, default=0.1, help="dropout probability (default 0.1)")
    parser.add_argument("--name", default="language_model", help="file name stem (default language_model)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "language_model"),
                        help="directory for NAME.pt and NAME.json")
    args = parser.parse_args()
    for flag, value, low, high in (("--vocab", args.vocab, 2, 1 << 20), ("--hidden", args.hidden, 8, 8192),
                                   ("--heads", args.heads, 1, 128), ("--layers", args.layers, 1, 128),
                                   ("--seq", args.seq, 2, 8192)):
        if not low <= value <= high:
            common.fail(PROG, f"{flag}: {value} is not from {low} to {high}")
    if args.hidden % args.heads != 0:
        common.fail(PROG, f"--hidden: {args.hidden} is not a multiple of --heads {args.heads}")
    if not 0 <= args.dropout < 1:
        common.fail(PROG, f"--dropout: {args.dropout} is not in [0, 1)")
    if not args.name or os.sep in args.name:
        common.fail(PROG, f"--name: '{args.name}' is not a file name stem")
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    started = time.monotonic()
    model = LanguageModel(args.vocab, args.hidden, args.heads, args.layers, args.seq, args.dropout)
    scripted = torch.jit.script(model)
    path = os.path.join(args.out, args.name + ".pt")
    scripted.save(path)
    inputs = [str(common.ShapeSpec((args.seq,), "int64", 0, args.vocab)), str(common.ShapeSpec((args.seq,), "int64", 0, 2))]
    command = (f"headroom profile --torchscript {path} --input {inputs[0]} --input {inputs[1]} --depth 2 "
               f"--loss cross-entropy-last --batch-sizes 1,2,4 -o {args.name}-trace.json")
    with open(os.path.join(args.out, args.name + ".json"), "w") as f:
        json.dump({"model": args.name, "inputs": inputs, "vocab": args.vocab, "hidden": args.hidden, "heads": args.heads,
                   "layers": args.layers, "seq": args.seq, "parameters": sum(p.numel() for p in model.parameters()),
                   "profile": command}, f, indent=2)
        f.write("\n")
    print(f"{args.name}: {path} ({time.monotonic() - started:.1f} s)\n  {command}")


if __name__ == "__main__":
    main()
