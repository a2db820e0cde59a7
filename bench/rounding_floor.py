#!/usr/bin/python3
"""How far a micro-batched step's gradients are from the whole batch's by float32's rounding alone: the
examples' model stepped in PyTorch as micro-batches and whole, in float32 and in float64 (where the
difference is that of the sums' order only). A model whose float64 difference is ~1e-15 and float32
one above 1e-5 is at float32's floor, not wrong.

  /usr/bin/python3 bench/rounding_floor.py --model unet [--batch 32] [--split 16,16] [--image-size 128]
"""

import argparse
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "python"))
import models  # noqa: E402


def gradients(model, loss_fn, inputs, targets, splits):
    model.zero_grad()
    start, batch = 0, inputs.shape[0]
    for size in splits:
        (loss_fn(model(inputs[start:start + size]), targets[start:start + size]) * size / batch).backward()
        start += size
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    models.add_arguments(parser, model="unet")
    parser.add_argument("--split", default="16,16", help="the micro-batches, summing to --batch")
    args = parser.parse_args()
    splits = [int(s) for s in args.split.split(",")]
    if sum(splits) != args.batch:
        parser.error(f"--split: {args.split} does not sum to --batch {args.batch}")
    torch.manual_seed(0)
    model, loss_fn, make_batch, _ = models.build(args.model, args.image_size)
    inputs, targets = make_batch(args.batch)
    for dtype in (torch.float32, torch.float64):
        typed = copy.deepcopy(model).to(dtype).eval()  # BatchNorm on running statistics: exact per sample
        x = inputs.to(dtype) if inputs.is_floating_point() else inputs
        micro = gradients(typed, loss_fn, x, targets, splits)
        whole = gradients(typed, loss_fn, x, targets, [args.batch])
        worst = max(((m - w).abs().max() / w.abs().max()).item() for m, w in zip(micro, whole))
        print(f"{args.model} {str(dtype).replace('torch.', '')}: {args.split} against {args.batch}: "
              f"max relative difference {worst:.3g}")


if __name__ == "__main__":
    main()
