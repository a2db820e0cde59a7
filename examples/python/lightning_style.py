#!/usr/bin/python3
"""A Lightning-style training loop with a headroom plan applied, without Lightning installed.

The model is a LightningModule-shaped class (training_step, configure_optimizers), and a small
Trainer owns the loop and the backward, as Lightning's does. The plan enters through the iterator of
micro-batches, `step.micro_batches(inputs, targets)`: the trainer runs training_step on each, scales
the loss by the micro-batch's weight, calls backward itself, and steps the optimizer after the last.

  PYTHONPATH=build/default/python /usr/bin/python3 examples/python/lightning_style.py --model lm
"""

import argparse
import os
import sys

import headroom  # before torch: its thread pools then start as headroom's commands start them
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import planning  # noqa: E402


class LitModel(torch.nn.Module):
    """What a LightningModule holds: the network, its loss in training_step, its optimizer."""

    def __init__(self, network, loss_fn):
        super().__init__()
        self.network = network
        self.loss_fn = loss_fn

    def forward(self, inputs):
        return self.network(inputs)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        return self.loss_fn(self(inputs), targets)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


class Trainer:
    """Owns the loop and the backward; `plan`, when given, splits each batch as headroom planned it."""

    def __init__(self, max_steps, plan=None):
        self.max_steps, self.plan = max_steps, plan

    def fit(self, lit, batches):
        optimizer = lit.configure_optimizers()
        # The plan is for the network: its layers are the network's submodules.
        step = headroom.apply(self.plan, lit.network, optimizer, lit.loss_fn) if self.plan else None
        for batch_idx, (inputs, targets) in enumerate(batches):
            if batch_idx == self.max_steps:
                break
            if step is None:
                optimizer.zero_grad()
                loss = lit.training_step((inputs, targets), batch_idx)
                loss.backward()
                total = loss.item()
            else:
                total = 0.0
                for micro_inputs, micro_targets, weight in step.micro_batches(inputs, targets):
                    with step.autocast():  # the plan's precision, as Lightning's precision plugin would
                        loss = lit.training_step((micro_inputs[0], micro_targets), batch_idx) * weight
                    loss.backward()
                    total += loss.item()
            optimizer.step()
            print(f"step {batch_idx + 1}/{self.max_steps}: loss {total:.4f}", file=sys.stderr)
        return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    models.add_arguments(parser, model="lm")
    parser.add_argument("--precision", choices=["fp32", "bf16-autocast"], default="fp32",
                        help="the step's precision: profiled, planned and run in it")
    parser.add_argument("--report", help="write the step's report here (headroom compare reads it)")
    args = parser.parse_args()

    torch.manual_seed(0)
    network, loss_fn, make_batch, profile_args = models.build(args.model, args.image_size)
    lit = LitModel(network, loss_fn)
    inputs, _ = make_batch(args.batch)
    _, plan = planning.profile_and_plan(network, inputs, args, precision=args.precision, profile_args=profile_args,
                                        optimizer="adamw")
    print(plan)

    step = Trainer(args.steps, plan).fit(lit, (make_batch(args.batch, seed=i) for i in range(args.steps)))
    print(step)
    if args.report:
        step.save_report(args.report)
        print(f"\nreport written to {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
