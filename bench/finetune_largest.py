#!/usr/bin/python3
"""The largest whole batch that fits one budget, for resnet18 trained whole, with layer4 and fc, and
with fc alone: each profiled from Python in eager PyTorch, the largest batch the planner fits whole
(no micro-batches, nothing checkpointed) found, that batch applied in a plain loop under the
enforced budget with its measured peak beside the predicted one, and the next batch up applied
without a budget to show that it would not have fitted. The planner keeps a margin (5% by default)
below a budget; the batch it offers is shown beside the largest that fits without one.

  PYTHONPATH=build/default/python /usr/bin/python3 bench/finetune_largest.py [--fraction 0.6] [--steps 3]
"""

import argparse
import os
import sys

import headroom  # before torch: its thread pools then start as headroom's commands start them
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "python"))
import models  # noqa: E402
import planning  # noqa: E402

CASES = {"all": "", "layer4+fc": "*,!layer4,!fc", "fc": "*,!fc"}


def whole_plan(trace, budget, batch, margin):
    """The plan of `batch` run whole within `budget` less the planner's `margin`, or None where it does not fit."""
    try:
        return headroom.plan(trace, budget=budget, batch=batch, strategies="none", margin=margin)
    except headroom.Infeasible:
        return None


def largest_whole_batch(trace, budget, margin):
    """(the largest batch whose whole step fits `budget`, its plan), (0, None) where none does: the
    need grows with the batch, so a bisection."""
    best = whole_plan(trace, budget, 1, margin)
    if best is None:
        return 0, None
    fits, too_big = 1, 2
    while (plan := whole_plan(trace, budget, too_big, margin)) is not None:
        fits, too_big, best = too_big, 2 * too_big, plan
    while too_big - fits > 1:
        middle = (fits + too_big) // 2
        plan = whole_plan(trace, budget, middle, margin)
        if plan is not None:
            fits, best = middle, plan
        else:
            too_big = middle
    return fits, best


def fresh_model(freeze, args):
    """(resnet18 with `freeze`'s parameters frozen, its loss, its batches, Adam on what trains), seeded alike each call."""
    torch.manual_seed(0)
    model, loss_fn, make_batch, _ = models.build("resnet18", args.image_size)
    models.freeze(model, freeze)
    return model, loss_fn, make_batch, models.make_optimizer("adam", [p for p in model.parameters() if p.requires_grad])


def measured_peak(plan, freeze, args, enforce_budget):
    """The highest peak of `args.steps` steps after one warm-up, of a fresh model with the plan applied."""
    model, loss_fn, make_batch, optimizer = fresh_model(freeze, args)
    step = headroom.apply(plan, model, optimizer, loss_fn, enforce_budget=enforce_budget)
    try:
        for i in range(1 + args.steps):
            step(*make_batch(plan.global_batch, seed=i))
    except headroom.BudgetExceeded:
        return None
    finally:
        step.remove()
    return step.measured_peak_bytes


def profile(freeze, args):
    """The eager trace of resnet18 with `freeze`'s parameters frozen, at batch sizes up to --batch."""
    model, _, make_batch, optimizer = fresh_model(freeze, args)
    inputs, _ = make_batch(args.batch)
    return headroom.profile(model, inputs, batch_sizes=planning.batch_sizes_up_to(args.batch), capture="eager",
                            repeats=3, threads=args.threads, optimizer=optimizer)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=0.6,
                        help="the budget, as a fraction of what the all-trainable model's whole --batch needs")
    parser.add_argument("--batch", type=int, default=32, help="the largest batch size profiled")
    parser.add_argument("--steps", type=int, default=3, help="measured steps after one warm-up")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if not 0 < args.fraction <= 1 or args.batch < 1 or args.steps < 1:
        parser.error("--fraction must be in (0, 1], --batch and --steps at least 1")

    traces = {}
    for case, freeze in CASES.items():
        print(f"profiling resnet18, {case} trainable...", file=sys.stderr, flush=True)
        traces[case] = profile(freeze, args)
    need = headroom.plan(traces["all"], budget="1TiB", batch=args.batch, strategies="none").predicted_peak_bytes
    budget = int(args.fraction * need)
    print(f"budget: {budget:,} B ({budget / 2**20:.1f} MiB, {args.fraction:.0%} of the all-trainable whole "
          f"batch of {args.batch}: {need:,} B)\n")
    print("| trains | planner's largest (5% margin) | largest that fits | its predicted peak | "
          "measured, budget enforced | next batch up, measured without a budget |")
    print("|---|---|---|---|---|---|")
    failures = 0
    for case, freeze in CASES.items():
        print(f"applying resnet18, {case} trainable...", file=sys.stderr, flush=True)
        offered, _ = largest_whole_batch(traces[case], budget, margin=0.05)
        # Without the planner's margin: the batch the prediction says is the last to fit, run under
        # the budget, and the one after it, which should not.
        batch, plan = largest_whole_batch(traces[case], budget, margin=0.0)
        if batch == 0:
            print(f"| {case} | none | none: even a batch of 1 needs more | | | |")
            failures += 1
            continue
        peak = measured_peak(plan, freeze, args, enforce_budget=True)
        over = headroom.plan(traces[case], budget="1TiB", batch=batch + 1, strategies="none")
        next_peak = measured_peak(over, freeze, args, enforce_budget=False)
        failures += peak is None or plan.predicted_peak_bytes < peak or next_peak <= budget
        measured = "over the budget: refused" if peak is None else f"{peak:,}"
        beyond = f"over, by {next_peak - budget:,} B" if next_peak > budget else "FITS"
        print(f"| {case} | {offered} | {batch} | {plan.predicted_peak_bytes:,} | {measured} | "
              f"{batch + 1}: {next_peak:,} ({beyond}) |", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
