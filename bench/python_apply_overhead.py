#!/usr/bin/python3
"""The overhead of headroom.apply against the same plan written by hand in Python.

One model is profiled and planned at a fraction of its whole batch's need (the examples' models:
torchvision's resnet18, or the small language model of examples/python/models.py). Two copies with
the same weights then train on the same batches, step by step in alternation: one through
`headroom.apply(plan, ...)`, the other through the loop a user would write for the same plan (the
micro-batches copied out of the batch, each loss weighted b_i/B, torch.utils.checkpoint on the
planned submodules, the optimizer stepped after the last), at the same threads. Both run in one
process after `import headroom`, so both pay its counting allocator (a lock and a map entry per
allocation); the figure is apply's own cost over it. Printed: each side's median step and their
ratio, step by step (apply / by hand; above 1, apply is slower).

  PYTHONPATH=build/default/python /usr/bin/python3 bench/python_apply_overhead.py --model resnet18 --steps 20

With --process apply|by-hand --plan PLAN.json, one side alone runs in this process (by-hand without
importing headroom at all, so without its counting allocator): time the two as whole processes in
alternation to see what a loop written without headroom costs against apply.
"""

import argparse
import copy
import json
import os
import statistics
import sys
import time

if "--process" in sys.argv and "by-hand" in sys.argv:
    headroom = None  # the loop a user writes without headroom: not imported at all
else:
    import headroom  # before torch, as the package asks
import torch  # noqa: E402
import torch.utils.checkpoint  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "python"))
import models  # noqa: E402


def checkpoint_by_hand(model, names):
    """What a user writes to checkpoint these submodules: their forward through torch.utils.checkpoint."""
    for name in names:
        module = model.get_submodule(name)
        original = module.forward
        module.forward = lambda *args, _f=original: torch.utils.checkpoint.checkpoint(_f, *args, use_reentrant=False)


def step_by_hand(model, optimizer, loss_fn, plan, inputs, targets):
    optimizer.zero_grad(set_to_none=False)
    start = 0
    total = 0.0
    for size, weight in zip(plan.micro_batches, plan.loss_weights):
        micro_inputs = inputs[start:start + size].clone()
        micro_targets = targets[start:start + size].clone()
        loss = loss_fn(model(micro_inputs), micro_targets) * weight
        loss.backward()
        total += float(loss.detach())
        start += size
    optimizer.step()
    return total


class PlanFile:
    """What the loop by hand reads of a plan, from its JSON (no headroom)."""

    def __init__(self, path):
        with open(path) as f:
            document = json.load(f)
        self.micro_batches, self.loss_weights = document["micro_batches"], document["loss_weights"]
        self.global_batch, self.threads = document["global_batch"], document.get("threads")
        with open(document["trace"]["path"]) as f:
            layers = json.load(f)["layers"]
        self.checkpointed = [layer["name"] for layer in layers
                             if layer["kind"] != "loss" and layer["block"] in document["checkpointed_blocks"]]


def one_side(args):
    torch.manual_seed(0)
    model, loss_fn, make_batch, profile_args = models.build(args.model, args.image_size)
    if args.process == "apply":
        plan = headroom.Plan.load(args.plan)
        step = headroom.apply(plan, model, torch.optim.Adam(model.parameters(), lr=1e-4), loss_fn)
        run = step
    else:
        plan = PlanFile(args.plan)
        if plan.threads:
            torch.set_num_threads(plan.threads)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        checkpoint_by_hand(model, plan.checkpointed)
        run = lambda inputs, targets: step_by_hand(model, optimizer, loss_fn, plan, inputs, targets)  # noqa: E731
    seconds = []
    for i in range(args.steps + 1):
        batch = make_batch(plan.global_batch, seed=i)
        started = time.perf_counter()
        run(*batch)
        if i > 0:
            seconds.append(time.perf_counter() - started)
    print(f"{args.process}: median step {statistics.median(seconds):.4f} s over {args.steps} steps")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--process", choices=["apply", "by-hand"], help="run this side alone (with --plan)")
    parser.add_argument("--plan", help="with --process: the plan both sides run")
    models.add_arguments(parser, model="resnet18", steps_help="measured steps per side (after one warm-up each)")
    parser.add_argument("--trace", help="a trace of this model to plan from (default: profile it now)")
    args = parser.parse_args()
    if args.process:
        if not args.plan:
            parser.error("--process needs --plan")
        return one_side(args)

    torch.manual_seed(0)
    model, loss_fn, make_batch, profile_args = models.build(args.model, args.image_size)
    inputs, _ = make_batch(args.batch)
    import planning  # headroom's side: not for the loop by hand alone

    _, plan = planning.profile_and_plan(model, inputs, args, profile_args=profile_args, trace=headroom.Trace.load(args.trace) if args.trace else None)
    print(plan)

    planned, by_hand = copy.deepcopy(model), copy.deepcopy(model)
    step = headroom.apply(plan, planned, torch.optim.Adam(planned.parameters(), lr=1e-4), loss_fn)
    # apply set the plan's threads (torch's and OpenBLAS's); the loop by hand runs at the same.
    optimizer = torch.optim.Adam(by_hand.parameters(), lr=1e-4)
    checkpoint_by_hand(by_hand, step._checkpointed)

    seconds = {"apply": [], "by hand": []}
    ratios = []
    for i in range(args.steps + 1):
        batch = make_batch(args.batch, seed=i)
        order = ("apply", "by hand") if i % 2 == 0 else ("by hand", "apply")
        taken = {}
        for side in order:
            started = time.perf_counter()
            if side == "apply":
                step(*batch)
            else:
                step_by_hand(by_hand, optimizer, loss_fn, plan, *batch)
            taken[side] = time.perf_counter() - started
        if i == 0:
            continue  # warm-up: the optimizers' state is made
        for side in taken:
            seconds[side].append(taken[side])
        ratios.append(taken["apply"] / taken["by hand"])
        print(f"step {i}/{args.steps}: apply {taken['apply']:.4f} s, by hand {taken['by hand']:.4f} s, "
              f"ratio {ratios[-1]:.3f}", file=sys.stderr)
    print(f"\n{args.model}, global batch {args.batch} as {len(plan.micro_batches)} micro-batches, "
          f"{len(plan.checkpointed_blocks)} checkpointed blocks, {torch.get_num_threads()} threads, {args.steps} steps each side")
    print(f"median step: apply {statistics.median(seconds['apply']):.4f} s, by hand {statistics.median(seconds['by hand']):.4f} s")
    print(f"apply / by hand, step by step: median {statistics.median(ratios):.4f} "
          f"(min {min(ratios):.4f}, max {max(ratios):.4f})")
    print(f"apply's measured peak {step.measured_peak_bytes:,} B, predicted {plan.predicted_peak_bytes:,} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
