"""headroom from Python: profile an nn.Module, plan its step under a memory budget, and run the plan
in your own training loop with its peak measured against the prediction.

    import headroom                      # before torch, so its thread pools start as headroom's do
    trace = headroom.profile(model, example_inputs, batch_sizes=(1, 2, 4, 8, 16))
    plan = headroom.plan(trace, budget="2GiB", batch=64)
    print(plan)                          # what `headroom plan` prints
    step = headroom.apply(plan, model, optimizer, loss_fn)
    for inputs, targets in loader:
        loss = step(inputs, targets)     # micro-batches, checkpoints, the budget enforced
    print(step)                          # predicted against measured, as `headroom execute` prints

The work is the C++ core's (headroom._core), the same as the command line's: a trace or plan made
here is the file `headroom profile` or `headroom plan` would write, and `step.report()` is the
report `headroom execute` writes (`headroom compare` reads it once saved).
"""

import json
import numbers
import os
import sys

# The two thread pools a step runs on read these once, as they load (runtime/host_info.h): imported
# before torch, headroom gives them the settings its own commands run with. A setting the user made
# is kept.
if "torch" not in sys.modules:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import torch  # noqa: E402

from . import _core  # noqa: E402

__all__ = ["profile", "plan", "apply", "Trace", "Plan", "Step", "Error", "InputError", "Infeasible", "BudgetExceeded"]
__version__ = "0.1.0"


class Error(Exception):
    """Everything headroom raises of its own."""


class InputError(Error, ValueError):
    """Bad input: the message is the command line's one line naming the problem."""


class Infeasible(Error):
    """No plan fits the budget; the message says why and the least budget that would do."""


class BudgetExceeded(Error, MemoryError):
    """A step asked for more than the plan's budget: the message names the layer, phase and bytes."""

    def __init__(self, message, layer="", phase="", micro_batch=-1, requested_bytes=0, in_use_bytes=0, budget_bytes=0):
        super().__init__(message)
        self.layer, self.phase, self.micro_batch = layer, phase, micro_batch
        self.requested_bytes, self.in_use_bytes, self.budget_bytes = requested_bytes, in_use_bytes, budget_bytes


def _core_call(function, *args, **kwargs):
    """The core's errors as the package's: one line each, with the command line's words."""
    try:
        return function(*args, **kwargs)
    except _core.InputError as e:
        raise InputError(str(e)) from None
    except _core.Infeasible as e:
        raise Infeasible(str(e)) from None


# Everything torch allocates from here on is counted by the allocator `headroom execute` enforces
# budgets with (nothing is refused until a step sets a limit): a model built after `import
# headroom` has its parameters counted from the start. The host-memory regime is the commands'.
_core.allocator_install()
_core.enter_host_memory_regime()


def _write_atomically(path, text):
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as out:
        out.write(text)
    os.replace(temporary, path)


class Trace:
    """A profiled model: the JSON `headroom profile` writes (schema headroom.trace), in a file.

    `repr(trace)` is the summary `headroom profile` prints; `trace.to_dict()` the document;
    `trace.save(path)` and `Trace.load(path)` move it between scripts and the command line.
    """

    def __init__(self, text, path):
        self._text = text
        self.path = os.path.abspath(path)
        self._document = json.loads(text)
        # "scripted", "traced" or "eager": how profile() captured the module (the trace records it)
        self.how = {"script": "scripted", "trace": "traced", "eager": "eager"}.get(self._document["model"].get("capture"))

    @classmethod
    def load(cls, path):
        """Reads a trace file (one `headroom profile` wrote, or `Trace.save`), checking it whole."""
        text = _read_json_text(path)
        _core_call(_core.trace_summary, text, str(path))  # validates as the command line reads it
        return cls(text, path)

    def save(self, path):
        """Writes the trace to `path` (whole or not at all); later plans refer to it there."""
        _write_atomically(path, self._text)
        self.path = os.path.abspath(path)
        return self

    def to_dict(self):
        return json.loads(self._text)

    @property
    def model(self):
        return self._document["model"]["name"]

    @property
    def layers(self):
        """The layers' names: for a module, their submodule paths."""
        return [layer["name"] for layer in self._document["layers"]]

    def __repr__(self):
        return _core_call(_core.trace_summary, self._text, self.path)


def _read_json_text(path):
    """A file's text, which must be JSON; InputError naming the file otherwise."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    try:
        json.loads(text)
    except ValueError as e:
        raise InputError(f"{path}: not JSON: {e}") from None
    return text


class Plan:
    """A plan: the JSON `headroom plan` writes (schema headroom.plan).

    `print(plan)` shows what `headroom plan` prints; `plan.to_dict()` is the document, `plan.save(path)`
    writes it for `headroom execute` and `headroom simulate`.
    """

    def __init__(self, text, summary, after_summary="", path=None):
        self._text = text
        self._document = json.loads(text)
        self._summary = summary
        self._after = after_summary
        self.path = path

    @classmethod
    def load(cls, path):
        text = _core_call(_core.read_plan, _read_json_text(path), str(path))
        return cls(text, _core_call(_core.plan_summary, text, str(path)), "", os.path.abspath(path))

    def save(self, path):
        _write_atomically(path, self._text)
        self.path = os.path.abspath(path)
        return self

    def to_dict(self):
        return json.loads(self._text)

    @property
    def micro_batches(self):
        return list(self._document["micro_batches"])

    @property
    def loss_weights(self):
        return list(self._document["loss_weights"])

    @property
    def checkpointed_blocks(self):
        return list(self._document["checkpointed_blocks"])

    @property
    def budget_bytes(self):
        return self._document["budget_bytes"]

    @property
    def global_batch(self):
        return self._document["global_batch"]

    @property
    def predicted_peak_bytes(self):
        return self._document["predicted"]["peak_bytes"]

    @property
    def predicted_samples_per_second(self):
        return self._document["predicted"]["samples_per_second"]

    @property
    def precision(self):
        return self._document.get("precision", "fp32")

    @property
    def trace_path(self):
        return self._document["trace"]["path"]

    def __str__(self):
        return self._summary + self._after

    __repr__ = __str__


def profile(model, example_inputs, *, batch_sizes=(1, 2, 4, 8), optimizer="adam", precision="fp32", depth=None,
            layers=None, loss="cross-entropy", example_targets=None, output_index=None, capture="auto", threads=None,
            warmup=1, repeats=5, timing_seconds=2.0, seed=0, tempo=True, path=None):
    """Profiles `model` layer by layer, as `headroom profile` profiles a model, and returns its Trace.

    model: an nn.Module as it is, cut into layers at the submodule calls its forward makes. Its
        parameters are left as they were (the profile trains a copy).
    capture: how it is run. "script": as TorchScript (torch.jit.script, or torch.jit.trace on the
        example inputs where scripting fails), what `headroom profile --torchscript` reads. "eager":
        its own forward as it runs in eager PyTorch, nothing compiled, each layer's call watched by
        forward hooks: any module that runs (keyword inputs, a dict or dataclass output, its own
        loss, control flow that depends on the data, profiled as the synthetic batches take it).
        "auto" (the default): scripted where it scripts, else eager. `trace.how` says which.
    example_inputs: a batch-first tensor, a tuple of them for a forward that takes several, or a dict
        for one that takes keywords (`model(**inputs)`; eager capture; values other than tensors are
        passed as they are); one sample's shape and dtype (and an integer input's range) are read from it.
    batch_sizes: the micro-batch sizes measured, ascending (with, as on the command line, up to 6
        sizes between them where a layer's scratch memory steps, to find where).
    optimizer: the optimizer you train with, whose state is counted as it keeps it: a torch.optim.SGD,
        Adam or AdamW object (its parameter groups' settings read), such a class, (class, settings
        dict), or text: "adam" (the default), "adamw", "adam(amsgrad)", "sgd(momentum=0)", "sgd"
        (momentum 0.9). Only trainable parameters (requires_grad) have gradients and state: the
        module's own flags are read as they are, so freeze before profiling.
    precision: "fp32", "bf16-autocast", "bf16", or several comma-separated (an eager capture: fp32).
    depth / layers: which submodules are the layers (depth 1: the children), as --depth / --layers.
    loss: "cross-entropy" (classes along dimension 1, as torch.nn.functional.cross_entropy takes
        them: [N, C] or [N, C, H, W]), "cross-entropy-last" (along the last: a language model's
        [N, T, V]), "mse", "model" (the model returns its loss: the output, `outputs.loss`,
        `outputs["loss"]` or its first element), or (eager capture) a function loss(outputs, targets).
    example_targets: a batch-first target tensor, where the loss's default target (from the output)
        is not the one; a loss function needs it.
    output_index: where forward returns several outputs, the element the loss reads (eager capture
        otherwise reads `.logits`, else the first tensor).
    threads: intra-op threads (default: the idle cores, as the command line); warmup, repeats,
        timing_seconds, seed and tempo as the command line's --warmup, --repeats, --timing-seconds,
        --seed and --no-tempo.
    path: where to keep the trace (default: headroom's cache directory).

    Progress goes to stderr. Bad input raises InputError with the command line's message.
    """
    from . import _scripting

    if capture not in ("auto", "script", "eager"):
        raise InputError(f"capture: expected auto, script or eager, got {capture!r}")
    only_eager = isinstance(example_inputs, dict) or callable(loss)
    if capture == "script" and only_eager:
        raise InputError("capture: a TorchScript module takes positional tensors and a loss by name; "
                         + ("a dict of inputs" if isinstance(example_inputs, dict) else "a loss function")
                         + " needs capture=\"eager\"")
    if isinstance(batch_sizes, int):
        batch_sizes = (batch_sizes,)
    try:
        batch_text = ",".join(str(int(b)) for b in batch_sizes)
    except (TypeError, ValueError):
        raise InputError(f"--batch-sizes: expected positive integers, got {batch_sizes!r}") from None
    if isinstance(precision, (list, tuple)):
        precision = ",".join(precision)
    from ._optimizer import spec_text
    optimizer = spec_text(optimizer)
    # What the command line's parser takes, with its words.
    if not callable(loss) and loss not in ("cross-entropy", "cross-entropy-last", "mse", "model"):
        raise InputError(f"--loss: {loss} not in {{cross-entropy,cross-entropy-last,mse,model}}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise InputError(f"--threads: expected a positive number of threads, got {threads!r}")
    if isinstance(timing_seconds, bool) or not isinstance(timing_seconds, numbers.Real):
        raise InputError(f"--timing-seconds: expected a number of seconds, got {timing_seconds!r}")
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    module_path, how = None, "eager"
    if capture != "eager" and not only_eager:
        inputs = _scripting.as_tuple(example_inputs)
        specs = [_scripting.sample_spec(t, "example_inputs" if len(inputs) == 1 else f"example_inputs[{k}]")
                 for k, t in enumerate(inputs)]
        target = _scripting.sample_spec(example_targets, "example_targets") if example_targets is not None else ""
        module_path, how = _scripting.to_torchscript(model, inputs, trace_if_unscriptable=capture == "script")
    if module_path is not None:
        text = _core_call(_core.profile, module_path, specs, target, loss or "", ",".join(layers) if layers else "",
                          "" if depth is None else str(depth), "" if output_index is None else str(output_index),
                          batch_text, optimizer, precision, threads or 0, warmup, repeats, float(timing_seconds), seed,
                          tempo, "script" if how == "scripted" else "trace")
    else:
        text = _profile_eager(model, example_inputs, loss=loss, depth=depth, layers=layers, output_index=output_index,
                              example_targets=example_targets, batch_text=batch_text, optimizer=optimizer,
                              precision=precision, threads=threads, warmup=warmup, repeats=repeats,
                              timing_seconds=timing_seconds, seed=seed)
    if path is None:
        import hashlib
        from ._scripting import cache_directory
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        path = os.path.join(cache_directory("traces"), f"{type(model).__name__}-{digest}.json")
    trace = Trace(text, path)
    trace.save(path)
    trace.how = how
    return trace


def _profile_eager(model, example_inputs, *, loss, depth, layers, output_index, example_targets, batch_text, optimizer,
                   precision, threads, warmup, repeats, timing_seconds, seed):
    """The trace's text of the module run in eager PyTorch (headroom._eager), profiled on a copy."""
    import copy
    from ._eager import EagerCapture

    if isinstance(layers, str):
        layers = layers.split(",")
    try:
        copied = copy.deepcopy(model)  # the profile's optimizer steps train this one
    except Exception as e:  # whatever a module's own __deepcopy__ raises
        raise InputError(f"model: {type(model).__name__} cannot be copied to profile ({e}); "
                         "capture=\"script\" profiles its TorchScript instead") from None
    capture = EagerCapture(copied, example_inputs, loss=loss, depth=depth, layers=layers, output_index=output_index,
                           example_targets=example_targets, error=InputError)
    try:
        if capture.data_dependent:
            print(f"headroom: {capture.name}'s {', '.join(capture.data_dependent)} ran otherwise on a synthetic batch "
                  "than on the example (control flow that depends on the data): measured as the profiled "
                  "synthetic batches run it", file=sys.stderr)
        return _core_call(_core.profile_eager, capture, batch_text, optimizer, precision, threads or 0, warmup,
                          repeats, float(timing_seconds), seed)
    finally:
        capture.close()


def plan(trace, budget, batch, *, strategies="all", margin=0.05, optimizer=None, precision=None, rescale=True):
    """Plans the step of `batch` samples under `budget` as `headroom plan` does; returns the Plan.

    trace: a Trace, or the path of a trace file. budget: bytes, or text as the command line takes it
    ("8GiB", "512MiB"). strategies: "all", "none", or names comma-separated (as --strategies).
    margin: the fraction of the budget kept free. optimizer and precision: another than the trace's
    (optimizer: as profile takes it, its state estimated; precision: one of those the trace measured). rescale: compare the trace's times with this
    machine's (the cached calibration, or one measured now) and predict for it.

    Raises Infeasible where no plan fits (the message says the least budget), InputError for bad input.
    """
    if isinstance(trace, (str, os.PathLike)):
        trace = Trace.load(trace)
    if not isinstance(trace, Trace):
        raise InputError(f"trace: expected a headroom.Trace or a trace file's path, got {type(trace).__name__}")
    if isinstance(budget, bool) or not isinstance(budget, (int, str)):
        raise InputError(f"--budget: expected bytes or text such as 8GiB, got {budget!r}")
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise InputError(f"--batch: expected a whole number of samples, got {batch!r}")
    if isinstance(strategies, (list, tuple)):
        strategies = ",".join(strategies)
    if optimizer is not None:
        from ._optimizer import spec_text
        optimizer = spec_text(optimizer)
    text, summary, after = _core_call(_core.plan, trace.path, str(budget), batch, strategies, float(margin),
                                      optimizer or "", precision or "", bool(rescale))
    return Plan(text, summary, after)


def apply(plan, model, optimizer, loss_fn, *, enforce_budget=True, warmup_steps=1):
    """The plan (a Plan, or a plan file's path) as a training step of your own loop: `loss = step(inputs, targets)`.

    Each call zeroes the gradients, runs the plan's micro-batches (each copied out of the batch's
    first dimension as it starts, as headroom's executor loads a micro-batch; each loss weighted
    b_i/B so the gradients are the whole batch's), with
    torch.utils.checkpoint around the plan's checkpointed blocks (named by submodule path), and
    steps the optimizer; it returns the batch's loss as a float. The plan's budget is enforced by
    the allocator `headroom execute` uses, on the step's memory (the model's parameters, gradients and
    optimizer state, and what the step allocates; the batch your loop holds is yours, as a dataset is): a step that would go over raises
    BudgetExceeded naming the layer, phase and bytes. The step's measured peak and time are kept beside the prediction:
    `step.report()` (the report `headroom execute` writes), `print(step)`.

    A batch of keyword inputs is a dict: `step(batch)` runs `model(**batch)` on each micro-batch of
    its tensors. `loss_fn=None`: the model returns its loss (`outputs.loss`, `outputs["loss"]`, its
    first element, or the output), as with profile(loss="model"), and `step(inputs)` takes no targets.

    `step.micro_batches(inputs, targets)` yields (inputs, targets, loss weight) for loops that
    must run the backward themselves.

    fp32 and bf16-autocast plans run (under bf16-autocast the forward and loss run in
    `step.autocast()`, and each layer's weight casts leave autocast's cache as the layer ends, as in
    headroom's executor); others are refused.
    """
    from ._apply import Step

    if isinstance(plan, (str, os.PathLike)):
        plan = Plan.load(plan)
    return Step(plan, model, optimizer, loss_fn, enforce_budget=enforce_budget, warmup_steps=warmup_steps)


from ._apply import Step  # noqa: E402
