"""A module captured in eager PyTorch (profile(capture="eager")): it measures what the TorchScript
capture measures, any module that runs is profiled (keyword inputs, a dataclass output with its own
loss, a loop as long as the data needs), its plans run in apply with the whole batch's gradients and
the predicted peak, and what cannot be measured is refused in one line."""

import dataclasses
import math
import os
import subprocess
from typing import Optional

import pytest

import headroom  # before torch, as the package asks
import torch
from torch import nn
from torch.nn import functional as F

HEADROOM = os.environ.get("HEADROOM_CLI")
QUICK = dict(repeats=1, threads=1, timing_seconds=0)


class Residual(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class Net(nn.Module):
    """Scriptable, so both captures take it."""

    def __init__(self, width=32, depth=3):
        super().__init__()
        self.stem = nn.Linear(16, width)
        self.blocks = nn.Sequential(*[Residual(width) for _ in range(depth)])
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        return self.head(self.blocks(torch.tanh(self.stem(x))))


def test_both_captures_measure_the_same_layers(tmp_path):
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(4, 16)
    traces = {c: headroom.profile(model, x, batch_sizes=(1, 2, 4), depth=2, capture=c, **QUICK,
                                  path=str(tmp_path / f"{c}.json")).to_dict() for c in ("script", "eager")}
    assert traces["eager"]["model"]["capture"] == "eager" and headroom.Trace.load(tmp_path / "eager.json").how == "eager"
    script, eager = traces["script"]["layers"], traces["eager"]["layers"]
    assert [layer["name"] for layer in eager] == [layer["name"] for layer in script] == \
        ["stem", "blocks.0", "blocks.1", "blocks.2", "head", "loss"]
    assert [layer["inputs"] for layer in eager] == [layer["inputs"] for layer in script]
    # Within 1% of the step's peak: the forward's own code between calls (the tanh) is TorchScript's
    # graph in one and Python in the other.
    peaks = {step["batch"]: step["peak_bytes"] for step in traces["script"]["steps"]}
    for a, b in zip(script, eager):
        assert b["param_bytes"] == a["param_bytes"], a["name"]
        assert b["saves_inputs"] == a["saves_inputs"], a["name"]
        for s, e in zip(a["samples"], b["samples"]):
            for field in ("kept_bytes", "output_bytes", "fwd_transient_bytes", "bwd_transient_bytes"):
                assert abs(e[field] - s[field]) <= 0.01 * peaks[s["batch"]], (a["name"], field, s["batch"])
            assert e["kept_bytes"] == s["kept_bytes"] and e["output_bytes"] == s["output_bytes"], a["name"]


def test_the_users_module_is_left_as_it_was():
    torch.manual_seed(0)
    model = Net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    headroom.profile(model, torch.randn(4, 16), batch_sizes=(1, 2), capture="eager", **QUICK)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert not model._forward_hooks and not model.stem._forward_pre_hooks


@dataclasses.dataclass
class Output:
    loss: Optional[torch.Tensor]
    logits: torch.Tensor


class Refine(nn.Module):
    """Up to 4 steps, until one changes the states by less than a quarter of their norm."""

    def __init__(self, width):
        super().__init__()
        self.update = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.Tanh())

    def forward(self, x):
        for _ in range(4):
            change = self.update(x)
            x = x + change
            if change.norm(dim=-1).mean() < 0.25 * x.norm(dim=-1).mean():
                break
        return x


class Tagger(nn.Module):
    """Keyword inputs, a dataclass output with its own loss, a loop the data ends: neither scripts nor traces."""

    def __init__(self, vocab=50, width=32, classes=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = Residual(width)
        self.refine = Refine(width)
        self.head = nn.Linear(width, classes)
        self.classes = classes

    def forward(self, input_ids, attention_mask, labels=None):
        x = self.embed(input_ids) * attention_mask.unsqueeze(-1)
        logits = self.head(self.refine(self.mix(x)))
        loss = None if labels is None else F.cross_entropy(logits.reshape(-1, self.classes), labels.reshape(-1))
        return Output(loss=loss, logits=logits)


BATCH = 8


def tagger_batch(seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(0, 50, (BATCH, 12), generator=g),
            "attention_mask": torch.randint(0, 2, (BATCH, 12), generator=g).to(dtype),
            "labels": torch.randint(0, 5, (BATCH, 12), generator=g)}


def test_a_module_that_neither_scripts_nor_traces_is_profiled_planned_and_applied(capfd):
    torch.manual_seed(0)
    model = Tagger()
    with pytest.raises(Exception):
        torch.jit.script(model)
    trace = headroom.profile(model, tagger_batch(0), batch_sizes=(1, 2, 4, 8), loss="model", depth=1, **QUICK)
    assert trace.how == "eager"
    assert "captured in eager PyTorch" not in capfd.readouterr().err  # a dict of inputs: eager without trying
    assert trace.layers == ["embed", "mix", "refine", "head"]  # the model's own loss: no loss layer
    config = trace.to_dict()["model"]["config"]
    assert config["input_names"] == "input_ids,attention_mask,labels" and config["loss"] == "model"
    assert config["control_flow"].startswith("as the profiled (synthetic) batches ran it")
    need = headroom.plan(trace, budget="1TiB", batch=BATCH, strategies="none").predicted_peak_bytes
    plan = headroom.plan(trace, budget=int(0.6 * need), batch=BATCH)
    assert len(plan.micro_batches) > 1

    # The plan's gradients against the whole batch's, in float64 (see test_package.py).
    planned = Tagger().double()
    reference = Tagger().double()
    reference.load_state_dict(planned.state_dict())
    batch = tagger_batch(1, torch.float64)
    reference(**batch).loss.backward()
    check = headroom.apply(plan, planned, torch.optim.SGD(planned.parameters(), lr=0.0), None, enforce_budget=False)
    check(batch)
    for (name, p), q in zip(planned.named_parameters(), reference.parameters()):
        assert (p.grad - q.grad).abs().max().item() <= 1e-12 * q.grad.abs().max().item(), name
    check.remove()

    step = headroom.apply(plan, model, torch.optim.Adam(model.parameters()), None)
    for seed in range(4):
        assert math.isfinite(step(tagger_batch(seed)))
    report = step.report()
    measured, predicted = report["measured"]["peak_bytes"], report["predicted"]["peak_bytes"]
    assert measured <= report["budget_bytes"]
    assert 0 <= (predicted - measured) / measured <= 0.01, (predicted, measured)


def test_a_loss_function_of_the_users_reads_the_targets_given():
    model = Net()
    x, y = torch.randn(4, 16), torch.randn(4, 10)
    trace = headroom.profile(model, x, batch_sizes=(1, 2), loss=lambda out, t: ((out - t) ** 2).mean(),
                             example_targets=y, **QUICK)
    assert trace.how == "eager" and trace.layers[-1] == "loss"
    assert trace.to_dict()["model"]["config"]["target"] == "10:float32"


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


def test_buffers_are_resident_and_the_checkpointed_step_holds_what_is_predicted():
    torch.manual_seed(0)
    model = ConvNet()
    inputs, targets = torch.randn(BATCH, 3, 16, 16), torch.randint(0, 10, (BATCH,))
    trace = headroom.profile(model, inputs, batch_sizes=(1, 2, 4, 8), capture="eager", **QUICK)
    # BatchNorm's running statistics and counters live as long as the module.
    assert trace.to_dict()["model_extra_bytes"] == sum(b.numel() * b.element_size() for b in model.buffers())
    need = headroom.plan(trace, budget="1TiB", batch=BATCH, strategies="none").predicted_peak_bytes
    plan = headroom.plan(trace, budget=int(0.8 * need), batch=BATCH)
    step = headroom.apply(plan, model, torch.optim.Adam(model.parameters()), nn.CrossEntropyLoss())
    for _ in range(3):
        step(inputs, targets)
    report = step.report()
    measured, predicted = report["measured"]["peak_bytes"], report["predicted"]["peak_bytes"]
    assert 0 <= (predicted - measured) / measured <= 0.01, (predicted, measured, str(plan))


class Gate(nn.Module):
    """Calls `b` only where the input holds a value over 100: the example does, a synthetic batch not."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        if (x > 100).any():
            x = self.b(x)
        return self.a(x)


def test_control_flow_the_data_decides_is_refused_where_it_calls_other_layers():
    x = torch.randn(4, 4)
    x[0, 0] = 1000.0
    with pytest.raises(headroom.InputError, match=r"^model: Gate's forward called a where the example batch called b: "
                                                  r"its control flow depends on the data"):
        headroom.profile(Gate(), x, batch_sizes=(1, 2), capture="eager", **QUICK)


class Repeat(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        while x.abs().max() > 10:  # as many halvings as the data needs
            x = self.fc(x) / 2
        return self.fc(x)


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.repeat, self.last = nn.Linear(4, 4), Repeat(), nn.Linear(4, 2)

    def forward(self, x):
        return self.last(self.repeat(self.first(x) * 1000))


def test_a_loop_the_data_decides_is_measured_as_the_synthetic_batches_run_it():
    torch.manual_seed(0)
    # Far more halvings for the example than for a synthetic batch (standard normal): said in the trace.
    trace = headroom.profile(Outer(), torch.full((4, 4), 1e6), batch_sizes=(1, 2), capture="eager", **QUICK)
    # The first depth's layers; the next would call repeat.fc more than once.
    assert trace.layers == ["first", "repeat", "last", "loss"]
    assert trace.to_dict()["model"]["config"]["control_flow"] == (
        "as the profiled (synthetic) batches ran it; repeat ran otherwise on the example batch (it depends on the data)")
    with pytest.raises(headroom.InputError, match=r"^--depth: repeat\.fc is called \d+ times in one forward"):
        headroom.profile(Outer(), torch.randn(4, 4), batch_sizes=(1,), capture="eager", depth=2, **QUICK)


def test_bad_input_names_the_argument():
    model = Net()
    x = torch.randn(4, 16)
    with pytest.raises(headroom.InputError, match=r"^capture: expected auto, script or eager, got 'jit'$"):
        headroom.profile(model, x, capture="jit")
    with pytest.raises(headroom.InputError, match=r"^capture: .*a dict of inputs needs capture=\"eager\""):
        headroom.profile(model, {"x": x}, capture="script")
    with pytest.raises(headroom.InputError, match=r"^example_targets: a loss function of your own needs"):
        headroom.profile(model, x, loss=lambda out, t: out.sum(), capture="eager")
    with pytest.raises(headroom.InputError, match=r"^--depth: '0' is not a depth from 1 to 16"):
        headroom.profile(model, x, depth=0, capture="eager")
    with pytest.raises(headroom.InputError, match=r"^--layers: blocks\.9 is not a submodule of Net$"):
        headroom.profile(model, x, layers=["stem", "blocks.9"], capture="eager")
    with pytest.raises(headroom.InputError, match=r"^precision: a module captured in eager PyTorch \(Net\) is profiled in fp32"):
        headroom.profile(model, x, batch_sizes=(1,), precision="bf16-autocast", capture="eager", **QUICK)
    with pytest.raises(headroom.InputError, match=r"^loss: the model.s output \(Tensor\) holds no loss"):
        headroom.profile(model, x, loss="model", capture="eager")
    with pytest.raises(headroom.InputError, match=r"^example_inputs: the dict holds no tensor$"):
        headroom.profile(model, {"flag": True})


@pytest.mark.skipif(not HEADROOM, reason="HEADROOM_CLI (the command-line binary) not given")
def test_the_command_line_plans_an_eager_trace_and_execute_refuses_it(tmp_path):
    trace = headroom.profile(Net(), torch.randn(4, 16), batch_sizes=(1, 2, 4), capture="eager", **QUICK,
                             path=str(tmp_path / "eager.json"))
    plan = tmp_path / "plan.json"
    subprocess.run([HEADROOM, "plan", trace.path, "--budget", "1GiB", "--batch", "8", "-o", str(plan)], check=True,
                   capture_output=True)
    done = subprocess.run([HEADROOM, "execute", str(plan), "--steps", "1"], capture_output=True, text=True)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].endswith(
        "run its plans in your own training loop with headroom.apply"), done.stderr
