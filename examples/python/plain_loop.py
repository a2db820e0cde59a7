#!/usr/bin/python3
"""A plain PyTorch training loop with a headroom plan applied.

The model is profiled and planned from this script at a fraction of what its whole batch needs, its
gradients under the plan are checked against the unplanned whole-batch step, and then it trains in
an ordinary loop in which `step(inputs, targets)` runs the plan's micro-batches and checkpoints under
the enforced budget. The step's measured peak and time are printed beside the prediction.

  PYTHONPATH=build/default/python /usr/bin/python3 examples/python/plain_loop.py --model resnet18
  PYTHONPATH=build/default/python /usr/bin/python3 examples/python/plain_loop.py --model lm --report lm.json
  ... plain_loop.py --model resnet18 --freeze '*,!fc'                  # fine-tune fc alone
  ... plain_loop.py --model mobilenet_v3_small --optimizer 'sgd(momentum=0)'
  ... plain_loop.py --model unet                                      # per-pixel classes [N, H, W]
  ... plain_loop.py --model tagger               # keyword inputs, its own loss: captured in eager PyTorch
  ... plain_loop.py --model lm --capture eager   # the language model run as its own Python
"""

import argparse
import contextlib
import copy
import os
import sys
import time

import headroom  # before torch: its thread pools then start as headroom's commands start them
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import planning  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    models.add_arguments(parser, model="resnet18", dict_batches=True)
    parser.add_argument("--capture", choices=["auto", "script", "eager"], default="auto",
                        help="how headroom.profile runs the model: as TorchScript, or its own forward in eager PyTorch")
    parser.add_argument("--precision", choices=["fp32", "bf16-autocast"], default="fp32",
                        help="the step's precision: profiled, planned and run in it")
    parser.add_argument("--report", help="write the step's report here (headroom compare reads it)")
    args = parser.parse_args()

    torch.manual_seed(0)
    model, loss_fn, make_batch, profile_args = models.build(args.model, args.image_size)
    inputs, targets = make_batch(args.batch)

    started = time.perf_counter()
    models.freeze(model, args.freeze)
    need, plan = planning.profile_and_plan(model, inputs, args, precision=args.precision,
                                           profile_args={**profile_args, "capture": args.capture},
                                           optimizer=models.make_optimizer(args.optimizer, model.parameters()))
    print(f"profiled and planned in {time.perf_counter() - started:.1f} s; the whole batch needs {need / 2**20:.1f} MiB\n")
    print(plan)

    # The plan's gradients against the unplanned whole-batch step, from the same weights and data.
    # BatchNorm in eval mode and dropout off on both sides: in training mode a micro-batch's
    # statistics are its own, and the gradients differ by design.
    planned, reference = copy.deepcopy(model).eval(), copy.deepcopy(model).eval()
    with (torch.autocast("cpu", dtype=torch.bfloat16) if args.precision == "bf16-autocast" else contextlib.nullcontext()):
        reference_loss = models.step_loss(reference, loss_fn, inputs, targets)
    reference_loss.backward()
    check = headroom.apply(plan, planned, models.make_optimizer(args.optimizer, planned.parameters(), 0.0), loss_fn,
                           warmup_steps=0)
    check(inputs, targets)
    check.remove()
    difference = models.max_relative_difference(planned, reference)
    print(f"gradients against the whole-batch step: max relative difference {difference:.2e}\n")
    del planned, reference, check

    optimizer = models.make_optimizer(args.optimizer, model.parameters())
    step = headroom.apply(plan, model, optimizer, loss_fn)
    for i in range(args.steps):
        inputs, targets = make_batch(args.batch, seed=i)
        loss = step(inputs, targets)
        print(f"step {i + 1}/{args.steps}: loss {loss:.4f}", file=sys.stderr)
    print(step)
    if args.report:
        step.save_report(args.report)
        print(f"\nreport written to {args.report}")
    # bf16's rounding differs between a micro-batch and the whole batch: its own tolerance.
    return 0 if difference <= (1e-5 if args.precision == "fp32" else 5e-2) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except headroom.Error as error:  # a budget no plan fits, a model headroom cannot run: one line
        sys.exit(f"plain_loop.py: {error}")
