"""examples/python/plain_loop.py as a reader of the README runs it, on batches small enough for a
test: it profiles, plans, checks the plan's gradients against the whole batch's step, and trains."""

import json
import os
import re
import subprocess
import sys

import pytest

LOOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python", "plain_loop.py")


def run_loop(tmp_path, *flags):
    report = tmp_path / "report.json"
    # A child of its own: plain_loop imports headroom before torch, as a user's script does.
    done = subprocess.run([sys.executable, LOOP, "--batch", "4", "--steps", "2", "--timing-seconds", "0.2",
                           "--image-size", "64", "--threads", "1", "--report", str(report), *flags],
                          capture_output=True, text=True, env=os.environ.copy(), timeout=240)
    return done, (json.loads(report.read_text()) if report.exists() else None)


@pytest.mark.parametrize("flags, under", [
    # keyword inputs, a dataclass output with its own loss, a data-dependent loop: captured eager.
    # Where the plan checkpoints blocks.1 alone (the profile's times decide), the checkpoint holds
    # the attention mask the forward's own code made (128 B a sample) until the block's backward,
    # which the prediction does not count: 256 B under at 2 x 2, 512 B at one micro-batch of 4.
    (["--model", "tagger", "--fraction", "0.8"], 128 * 4),
    # a frozen backbone under SGD without momentum, captured eager
    (["--model", "resnet18", "--freeze", "*,!fc", "--optimizer", "sgd(momentum=0)", "--capture", "eager",
      "--fraction", "0.95"], 0),  # its 11 M frozen parameters are most of what a batch of 4 needs
])
def test_the_loop_trains_under_its_plan_with_the_whole_batchs_gradients(tmp_path, flags, under):
    done, report = run_loop(tmp_path, *flags)
    assert done.returncode == 0, done.stderr[-2000:]
    difference = float(re.search(r"max relative difference ([0-9.e+-]+)", done.stdout).group(1))
    assert difference <= 1e-5
    predicted, measured = report["predicted"]["peak_bytes"], report["measured"]["peak_bytes"]
    assert measured - under <= predicted <= 1.01 * measured, (predicted, measured, report["checkpointed_blocks"])
    assert measured <= report["budget_bytes"]


def test_a_budget_no_plan_fits_is_one_line_naming_the_least(tmp_path):
    done, report = run_loop(tmp_path, "--model", "tagger", "--fraction", "0.05")
    assert done.returncode != 0 and report is None
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("plain_loop.py: infeasible:") and "the budget must be at least" in last
    assert "Traceback" not in done.stderr
