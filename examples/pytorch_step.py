#!/usr/bin/python3
"""PyTorch's own answers for a TorchScript chain, to hold headroom's against.

  step  --model M.pt --data D.pt --loss cross-entropy|cross-entropy-last|mse|model --optimizer sgd|adam [--threads T] [--out R.json]
        one full-batch optimizer step from the module's own weights, compared with the weights headroom
        ended its step with (written by C++ into D.pt); prints {"max_rel_diff": ..., "parameters": n, ...}
  peak  --model M.pt --input SHAPE:DTYPE --batch B [--target SHAPE:DTYPE] [--loss ...] --optimizer ...
        the peak of allocated CPU memory during one plain training step, from torch.profiler
  loop  --model M.pt --input SHAPE:DTYPE --batch B --steps N [--threads T] ...
        a plain Python training loop's samples/s (median step time after warm-up)
  (--input repeated for a forward that takes several inputs, in its order; D.pt then holds input.1 ...)
  versions
        {"python", "torch", "torchvision"}: a probe for tests (exit 77 when torch is missing)

SHAPE:DTYPE is per sample, as for `headroom profile --torchscript`: 3x224x224:float32, 128:int64:0-8192.
Without --target, cross-entropy's target is int64 classes over the output's last dimension, mse's target
a standard normal tensor of the output's shape. Results are JSON on stdout, or in --out (written
atomically). Bad arguments or inputs: one line on stderr, exit 2.
"""

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PROG = "pytorch_step.py"
torch = common.require_torch(PROG)
import torch.nn.functional as F  # noqa: E402


class UsageError(Exception):
    """Bad arguments or inputs: reported as one line, exit 2."""


# ---- What every subcommand shares --------------------------------------------------------------

# Module kinds whose forward depends on training mode only through randomness or batch statistics.
# The reference step puts these, and only these, in eval mode: BatchNorm then normalizes with its
# running statistics and dropout draws nothing, so headroom's micro-batched step and PyTorch's
# full-batch step compute the same function. MultiheadAttention applies its attention dropout
# functionally, gated by its own training flag; torchvision's StochasticDepth drops whole samples'
# residual branches at random (efficientnet, convnext).
BATCHNORM_KINDS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")
DROPOUT_KINDS = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout",
                 "MultiheadAttention", "StochasticDepth")


def load_model(path):
    if not os.path.isfile(path):
        raise UsageError(f"--model: '{path}' is not a regular file")
    try:
        model = torch.jit.load(path, map_location="cpu")
    except Exception as error:  # torch raises RuntimeError or its own subclasses, with long messages
        raise UsageError(f"--model: '{path}' is not a TorchScript file ({last_line(error)})")
    if not list(model.parameters()):
        raise UsageError(f"--model: '{path}' has no parameters to train")
    return model


def set_modes(model, batchnorm_eval, dropout_off):
    """Training mode, then eval mode for the module kinds asked for; returns the names so switched."""
    model.train()
    kinds = (BATCHNORM_KINDS if batchnorm_eval else ()) + (DROPOUT_KINDS if dropout_off else ())
    switched = []
    for name, module in model.named_modules():
        if getattr(module, "original_name", type(module).__name__) in kinds:
            module.eval()
            switched.append(name)
    return switched


def make_optimizer(name, parameters):
    # headroom's runtime/optimizer.cpp: SGD(lr 0.01, momentum 0.9) and Adam(lr 1e-3), libtorch's defaults
    # otherwise. libtorch 1.13's SGDOptions (dampening 0, weight decay 0, no Nesterov) and AdamOptions
    # (betas 0.9/0.999, eps 1e-8, weight decay 0, no amsgrad) default as torch.optim does. foreach stays
    # off as 1.13 has it by default, the per-tensor loop libtorch runs too.
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=0.01, momentum=0.9, foreach=False)
    return torch.optim.Adam(parameters, lr=1e-3, foreach=False)


def compute_loss(kind, out, target):
    try:
        if kind == "cross-entropy":
            return F.cross_entropy(out, target)  # classes along dimension 1, as PyTorch takes them
        if kind == "cross-entropy-last":
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
        if kind == "mse":
            if out.shape != target.shape:
                # mse_loss would broadcast and only warn.
                raise ValueError("shapes differ")
            return F.mse_loss(out, target)
    except (RuntimeError, ValueError) as error:
        raise UsageError(f"--loss {kind}: output {list(out.shape)} {out.dtype} and target {list(target.shape)} "
                         f"{target.dtype} do not fit ({last_line(error)})")
    if out.dim() != 0:
        raise UsageError(f"--loss model: the module's forward returns shape {list(out.shape)}, not a scalar loss")
    return out


def last_line(error):
    """TorchScript errors carry the script's traceback; its last line says what went wrong."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


class Inputs:
    """The specs of a forward's inputs (--input repeated), made into one batch together."""

    def __init__(self, specs):
        self.specs = list(specs)

    def __str__(self):
        return ",".join(str(s) for s in self.specs)

    def make(self, torch, batch, generator=None):
        return tuple(s.make(torch, batch, generator) for s in self.specs)


def run_forward(model, x, what):
    """x: one tensor, or a tuple of them for a forward that takes several."""
    try:
        return model(*x) if isinstance(x, tuple) else model(x)
    except Exception as error:
        raise UsageError(f"the model rejects {what}: {last_line(error)}")


def target_spec(model, input_spec, target, loss):
    """The target's per-sample spec: --target as given, else inferred from one sample's output."""
    if loss == "model":
        if target is not None:
            raise UsageError("--target: the module computes its own loss (--loss model) and takes no target")
        return None
    if target is not None:
        return target
    # Eval mode for this one sample: in training mode BatchNorm refuses a batch of one with a 1x1 map.
    # Callers set the modes they train in afterwards.
    model.eval()
    with torch.no_grad():
        out = run_forward(model, input_spec.make(torch, 1), f"--input {input_spec}")
    if loss in ("cross-entropy", "cross-entropy-last"):
        if out.dim() < 2 or not out.is_floating_point():
            raise UsageError(f"--loss {loss}: the output {list(out.shape)} {out.dtype} has no class dimension")
        classes = out.dim() - 1 if loss == "cross-entropy-last" else 1
        dims = tuple(d for k, d in enumerate(out.shape) if k not in (0, classes))
        # A [B, C] output has a target of one class per sample: per-sample shape (), which SHAPE cannot
        # write; ShapeSpec makes (B,) + () all the same.
        return common.ShapeSpec(dims, "int64", 0, out.shape[classes])
    return common.ShapeSpec(tuple(out.shape[1:]), str(out.dtype).replace("torch.", ""))


def autocast_region(dtype):
    """torch.autocast on the CPU to `dtype` ("bf16"), or nothing for "fp32"."""
    import contextlib
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=torch.bfloat16)


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def optimizer_state_bytes(optimizer):
    """Bytes of the optimizer's tensors (momentum buffers, Adam's moments and its step counter)."""
    return sum(tensor_bytes(v for v in state.values() if torch.is_tensor(v)) for state in optimizer.state.values())


def finite_or_none(value):
    """JSON has no NaN or infinity (nlohmann's parser refuses them); such a value is written as null."""
    return value if value is not None and math.isfinite(value) else None


def write_json(document, path):
    text = json.dumps(document, indent=2) + "\n"
    if path is None:
        sys.stdout.write(text)
        return
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# ---- step ----------------------------------------------------------------------------------------

def load_data(path, parameter_count, loss):
    """D.pt: what headroom's C++ test writes with torch::pickle_save of a c10::Dict<std::string, Tensor>
    (read back by torch.load as a dict): `input`, `target` (not with --loss model) and `param.0` ..
    `param.{n-1}`, headroom's parameters after its step in module.parameters() order; optionally
    `grad.0` .. `grad.{n-1}`, the gradients headroom accumulated before its optimizer step (all or none).
    Returns the dict and whether it has the gradients."""
    if not os.path.isfile(path):
        raise UsageError(f"--data: '{path}' is not a regular file")
    try:
        with warnings.catch_warnings():
            # torch.load hands a TorchScript archive to torch.jit.load with a warning; that case is
            # refused below as not a dict, in one line.
            warnings.simplefilter("ignore")
            # Our own file: PyTorch 2.6 made weights_only=True the default, which refuses the
            # archive headroom writes; 1.13 already takes the argument.
            data = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:
        raise UsageError(f"--data: '{path}' is not a file torch.load reads ({last_line(error)})")
    if not isinstance(data, dict):
        raise UsageError(f"--data: '{path}' holds a {type(data).__name__}, not a dict of tensors")
    # A forward with several inputs: the first is `input`, the further ones `input.1`, `input.2`, ...
    expected = {"input"} | ({"target"} if loss != "model" else set())
    expected |= {key for key in data if key.startswith("input.")}
    expected |= {f"param.{i}" for i in range(parameter_count)}
    has_grads = any(key.startswith("grad.") for key in data)
    if has_grads:
        expected |= {f"grad.{i}" for i in range(parameter_count)}
    missing = sorted(expected - set(data), key=_key_order)
    extra = sorted(set(data) - expected, key=_key_order)
    if missing:
        raise UsageError(f"--data: '{path}' has no '{missing[0]}' (the model has {parameter_count} parameters"
                         f"{'; --loss model takes no target' if loss == 'model' else ''})")
    if extra:
        raise UsageError(f"--data: '{path}' has '{extra[0]}', which the model does not "
                         f"(it has {parameter_count} parameters)")
    for key, value in data.items():
        if not torch.is_tensor(value):
            raise UsageError(f"--data: '{key}' in '{path}' is a {type(value).__name__}, not a tensor")
    return data, has_grads


def _key_order(key):
    prefix, _, number = key.partition(".")
    return (prefix, int(number) if number.isdigit() else -1, key)


def rel_diff(a, b):
    """max|a-b| / max|b|: 0 when equal, infinite when b is zero and a is not (or either is not finite)."""
    num = (a - b).abs().max().item() if a.numel() else 0.0
    den = b.abs().max().item() if b.numel() else 0.0
    if num == 0.0:
        return 0.0
    if den == 0.0 or not math.isfinite(num) or not math.isfinite(den):
        return math.inf
    return num / den


def compare_pairs(ours, theirs):
    """The worst rel_diff over pairs of tensors, and its index (None when there are none)."""
    worst, index = 0.0, None
    for i, (a, b) in enumerate(zip(ours, theirs)):
        rel = rel_diff(a, b)
        if not rel <= worst:  # NaN counts as worst too
            worst, index = rel, i
    return worst, index


def norm_rel_diff(ours, exact):
    """||a - b|| / ||b|| over all the tensors together (Frobenius norms, in float64)."""
    num = sum(float((a.double() - b).pow(2).sum()) for a, b in zip(ours, exact))
    den = sum(float(b.pow(2).sum()) for b in exact)
    if num == 0.0:
        return 0.0
    return math.sqrt(num / den) if den > 0.0 else math.inf


def float64_gradients(args, x, target):
    """The step's gradients in float64, from the module file's own weights on the same data: the exact
    gradients, to float32's precision, that both float32 steps round differently."""
    model = load_model(args.model).double()
    named = list(model.named_parameters())
    set_modes(model, batchnorm_eval=True, dropout_off=True)
    widen = lambda t: t.double() if t.is_floating_point() else t
    x64 = tuple(widen(t) for t in x) if isinstance(x, tuple) else widen(x)
    out = run_forward(model, x64, "the float64 reference's input")
    loss = compute_loss(args.loss, out, widen(target) if target is not None else None)
    loss.backward()
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for _, p in named]


def cmd_step(args):
    if os.environ.get("HEADROOM_TEST_WITHOUT_ONEDNN", "0") not in ("", "0"):
        torch.backends.mkldnn.enabled = False  # as the C++ side of a cross-check (tests/support/without_onednn.cpp)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.no_graph_optimize:
        torch._C._set_graph_executor_optimize(False)  # as headroom runs a module (see cmd_peak)
    if args.float64_reference and (args.autocast != "fp32" or args.dtype != "fp32"):
        raise UsageError("--float64-reference: for float32 steps only (no --autocast bf16, no --dtype bf16)")
    model = load_model(args.model)
    if args.dtype == "bf16":
        model.to(torch.bfloat16)  # floating parameters and buffers, as headroom's bf16 precision has them
    named = list(model.named_parameters())
    data, has_grads = load_data(args.data, len(named), args.loss)
    if args.float64_reference and not has_grads:
        raise UsageError("--float64-reference: --data holds no gradients (grad.N) to compare")
    for i, (name, p) in enumerate(named):
        for key in [f"param.{i}"] + ([f"grad.{i}"] if has_grads else []):
            got = data[key]
            if tuple(got.shape) != tuple(p.shape):
                raise UsageError(f"--data: '{key}' has shape {list(got.shape)}, the model's parameter {i} "
                                 f"('{name}') {list(p.shape)}")
    switched = set_modes(model, batchnorm_eval=True, dropout_off=True)
    further = sorted((key for key in data if key.startswith("input.")), key=_key_order)
    if further and further != [f"input.{i}" for i in range(1, len(further) + 1)]:
        raise UsageError(f"--data: the further inputs are {', '.join(further)}, not input.1 .. input.{len(further)}")
    x = (data["input"],) + tuple(data[key] for key in further) if further else data["input"]
    target = data.get("target")
    # bf16: the optimizer updates float32 master weights, and each parameter takes its master's value.
    masters = [p.detach().float().clone() for _, p in named] if args.dtype == "bf16" else None
    optimizer = make_optimizer(args.optimizer, masters if masters is not None else [p for _, p in named])
    optimizer.zero_grad(set_to_none=True)
    for _, p in named:
        p.grad = None
    first = x[0] if isinstance(x, tuple) else x
    with autocast_region(args.autocast):
        out = run_forward(model, x, f"--data's input {list(first.shape)} {first.dtype}")
        # bf16: the loss reads the logits in float32, as a bf16 training loop casts them.
        loss = compute_loss(args.loss, out.float() if args.dtype == "bf16" else out, target)
    loss.backward()
    # A parameter the loss does not reach has no gradient; headroom's would be zero or absent alike.
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for _, p in named]
    if masters is not None:
        for master, (_, p) in zip(masters, named):
            master.grad = p.grad.float() if p.grad is not None else None
    optimizer.step()
    if masters is not None:
        with torch.no_grad():
            for master, (_, p) in zip(masters, named):
                p.copy_(master)

    ours = [p.detach() for _, p in named]
    theirs = [data[f"param.{i}"].to(p.dtype) for i, (_, p) in enumerate(named)]
    # The weights' difference is what the issue's threshold is written for. It is a lenient test of the
    # step: one step moves a weight by lr*grad, a small fraction of the weight, so the weights can agree
    # to 1e-5 with gradients that differ far more. (Differences of the updates, (a-w)-(b-w), say no more: each side
    # rounded w - lr*grad to float32, so they are rounding noise of w's size.) Hence the gradients too.
    rel, index = compare_pairs(ours, theirs)
    document = {
        "max_rel_diff": finite_or_none(rel),
        "parameters": len(named),
        "worst_parameter": None if index is None else named[index][0],
        "loss": finite_or_none(loss.item()),
        "max_rel_diff_grad": None,
        "worst_grad_parameter": None,
        "loss_kind": args.loss,
        "optimizer": args.optimizer,
        "threads": torch.get_num_threads(),
        "autocast": args.autocast,
        "dtype": args.dtype,
        "batch": first.shape[0] if first.dim() > 0 else None,
        "eval_modules": len(switched),
        "torch": torch.__version__,
    }
    if has_grads:
        # The gradients' difference, max|a-b|/max|b| worst over tensors: Adam's first step divides each
        # element by its own magnitude, so a gradient that is zero but for rounding (attention's key bias:
        # softmax ignores a shift shared by all keys) turns summation order into a full-size update, and
        # the weights differ far more than the gradients do. The gradients show the step's arithmetic.
        theirs_grads = [data[f"grad.{i}"].to(p.dtype) for i, (_, p) in enumerate(named)]
        rel, index = compare_pairs(grads, theirs_grads)
        document["max_rel_diff_grad"] = finite_or_none(rel)
        document["worst_grad_parameter"] = None if index is None else named[index][0]
        if args.float64_reference:
            # Both float32 steps against the exact gradients: what the comparison can promise is the
            # float32 reference's own rounding, whatever the machine's kernels sum in which order.
            exact = float64_gradients(args, x, target)
            document["headroom_grad_error_float64"] = finite_or_none(norm_rel_diff(theirs_grads, exact))
            document["pytorch_grad_error_float64"] = finite_or_none(norm_rel_diff(grads, exact))
    write_json(document, args.out)


# ---- peak ----------------------------------------------------------------------------------------

def allocation_events(prof):
    """The profiler's allocation events, from its event tree: (time ns, bytes, allocator total after)."""
    from torch._C._profiler import _EventType
    found = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.tag == _EventType.Allocation:
            fields = event.extra_fields
            if fields.device.type == "cpu":
                found.append((event.start_time_ns, fields.alloc_size, fields.total_allocated))
        stack.extend(event.children)
    found.sort(key=lambda e: e[0])
    return found


def memory_records(prof):
    """The `[memory]` records of the same run as torch.autograd.profiler reads them: (time us, bytes)."""
    # PyTorch 2.x's events give their start in ns only (1.13's in us only).
    start_us = (lambda e: e.start_ns() / 1000) if hasattr(torch._C._autograd._KinetoEvent, "start_ns") else (lambda e: e.start_us())
    return [(start_us(e), e.nbytes()) for e in prof.profiler.kineto_results.events()
            if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]


def running_peak(deltas):
    """Highest running sum of signed byte counts in order, above the level at the start (0 when none)."""
    level = peak = 0
    for delta in deltas:
        level += delta
        peak = max(peak, level)
    return peak, level


def cmd_peak(args):
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.no_graph_optimize:
        # As headroom runs a module: its graph as written, op by op through the dispatcher. With the
        # graph executor's optimizations on, TorchScript's own autocast pass rewrites the graph
        # under torch.autocast, and the step keeps other tensors (the language model of
        # export_language_model.py: 137.7 MB against 129.3 MB at batch 8); in fp32 the two agree.
        torch._C._set_graph_executor_optimize(False)
    model = load_model(args.model)
    target = target_spec(model, args.input, args.target, args.loss)
    switched = set_modes(model, batchnorm_eval=args.batchnorm_eval, dropout_off=args.no_dropout)
    parameters = list(model.parameters())
    optimizer = make_optimizer(args.optimizer, parameters)
    generator = torch.Generator().manual_seed(args.seed)
    data_bytes = []

    def one_step():
        # As headroom's libtorch 1.13 step does: zero_grad zeroes gradients in place (it cannot set them
        # to None), so backward accumulates into them and no tensor alive before the step is freed in it.
        optimizer.zero_grad(set_to_none=False)
        x = args.input.make(torch, args.batch, generator)
        y = target.make(torch, args.batch, generator) if target is not None else None
        data_bytes.append(tensor_bytes(list(x) + [y]))
        # Forward and loss in the autocast region, backward outside it, as PyTorch's AMP recipe has it.
        with autocast_region(args.autocast):
            loss = compute_loss(args.loss, run_forward(model, x, f"--input {args.input} at --batch {args.batch}"), y)
        loss.backward()
        optimizer.step()
        # x, y, the output, the loss and its graph are freed on return, inside the profiled region.

    one_step()  # warm-up: gradients and optimizer state exist from here on, as in any later step
    gc.collect()
    static = {
        "param_bytes": tensor_bytes(parameters),
        "grad_bytes": tensor_bytes(p.grad for p in parameters),
        "optimizer_state_bytes": optimizer_state_bytes(optimizer),
        "buffer_bytes": tensor_bytes(model.buffers()),
    }

    from torch.profiler import ProfilerActivity, profile
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        one_step()
    seconds = time.perf_counter() - started

    # How the peak comes from the events. With profile_memory=True, c10's CPU allocator reports each
    # allocation (+bytes) and each free (-bytes) of a block it allocated while the profiler was on,
    # together with its running total of such blocks. The step allocates everything it frees: gradients
    # are zeroed in place, the optimizer updates weights and state in place, and the data, activations
    # and graph are made and dropped inside it. So the running sum of the signed sizes in time order is
    # the allocated memory above the step's start, and its maximum is the step's peak. The primary
    # figure takes the events of the profiler's event tree (ns timestamps, each with the allocator's
    # running total: the peak is the highest total less the total before the first event). Cross-checks:
    # the running sum of the same events' sizes must give the same peak, the `[memory]` records that
    # torch.autograd.profiler attributes to ops (us timestamps, the same events) must sum to the same net
    # change. (Not used: the op-level cpu_memory_usage of prof.events(). torch.autograd.profiler gives
    # an op every record whose microsecond falls in its interval, both ends included, so records at the
    # boundary of two adjacent ops count twice; their sum over top-level ops missed the net change by up
    # to 2.5 MB on resnet18.)
    allocations = allocation_events(prof)
    if allocations:
        start_total = allocations[0][2] - allocations[0][1]
        peak_total = max(0, max(total for _, _, total in allocations) - start_total)
        end_total = allocations[-1][2] - start_total
    else:
        peak_total = end_total = 0
    peak_sum, net_sum = running_peak(size for _, size, _ in allocations)
    records = memory_records(prof)
    records.sort(key=lambda r: r[0])  # stable: records sharing a microsecond keep their order
    peak_records, net_records = running_peak(size for _, size in records)
    checks = {
        "allocation_events": len(allocations),
        "memory_records": len(records),
        "peak_from_running_sum": peak_sum,
        "peak_from_memory_records": peak_records,
        "net_from_allocator_totals": end_total,
        "net_from_running_sum": net_sum,
        "net_from_memory_records": net_records,
    }
    agree = (peak_sum == peak_total and peak_records == peak_total
             and len({end_total, net_sum, net_records}) == 1)
    document = {
        "step_peak_bytes": peak_total,
        "step_net_bytes": end_total,
        "static": static,
        "static_bytes": sum(static.values()),
        # What was allocated at the step's peak if, as here, only the static tensors were alive before it.
        "peak_bytes": sum(static.values()) + peak_total,
        "data_bytes": data_bytes[-1],
        "cross_check": checks,
        "consistent": agree,
        "batch": args.batch,
        "input": str(args.input),
        "target": None if target is None else str(target),
        "loss": args.loss,
        "optimizer": args.optimizer,
        "batchnorm_eval": args.batchnorm_eval,
        "dropout_off": args.no_dropout,
        "eval_modules": len(switched),
        "threads": torch.get_num_threads(),
        "autocast": args.autocast,
        "graph_optimize": not args.no_graph_optimize,
        "profiled_step_seconds": seconds,
        "torch": torch.__version__,
    }
    write_json(document, args.out)
    if not agree:
        print(f"{PROG}: the profiler's memory events disagree with each other: {json.dumps(checks)}", file=sys.stderr)
        sys.exit(1)


# ---- loop ----------------------------------------------------------------------------------------

def cmd_loop(args):
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model(args.model)
    target = target_spec(model, args.input, args.target, args.loss)
    set_modes(model, batchnorm_eval=args.batchnorm_eval, dropout_off=args.no_dropout)
    optimizer = make_optimizer(args.optimizer, list(model.parameters()))
    generator = torch.Generator().manual_seed(args.seed)
    seconds = []
    for i in range(args.warmup + args.steps):
        started = time.perf_counter()
        # The data is made inside the step, as headroom makes each micro-batch's when its turn comes.
        optimizer.zero_grad(set_to_none=False)
        x = args.input.make(torch, args.batch, generator)
        y = target.make(torch, args.batch, generator) if target is not None else None
        loss = compute_loss(args.loss, run_forward(model, x, f"--input {args.input} at --batch {args.batch}"), y)
        loss.backward()
        optimizer.step()
        del x, y, loss
        elapsed = time.perf_counter() - started
        if i >= args.warmup:
            seconds.append(elapsed)
    median = statistics.median(seconds)
    write_json({
        "samples_per_second": args.batch / median,
        "median_step_seconds": median,
        "step_seconds": seconds,
        "batch": args.batch,
        "steps": args.steps,
        "warmup": args.warmup,
        "threads": torch.get_num_threads(),
        "input": str(args.input),
        "target": None if target is None else str(target),
        "loss": args.loss,
        "optimizer": args.optimizer,
        "batchnorm_eval": args.batchnorm_eval,
        "dropout_off": args.no_dropout,
        "torch": torch.__version__,
    }, args.out)


def cmd_versions(args):
    try:
        import torchvision
        vision = torchvision.__version__
    except ImportError:
        vision = None
    write_json({"python": platform.python_version(), "executable": sys.executable, "torch": torch.__version__,
                "torchvision": vision}, args.out)


# ---- Arguments -----------------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line naming the problem, as headroom's own commands answer bad usage.
        common.fail(self.prog, message)


def shape_arg(flag):
    def parse(text):
        try:
            return common.parse_shape(text, flag)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error).split(": ", 1)[1])
    parse.__name__ = "SHAPE:DTYPE"
    return parse


def count_arg(low, high):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not an integer")
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in [{low}, {high}]")
        return value
    parse.__name__ = "integer"
    return parse


def build_parser():
    parser = Parser(prog=PROG, description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", metavar="step|peak|loop|versions", parser_class=Parser)
    commands.required = True

    step = commands.add_parser("step", help="one full-batch step compared with headroom's weights")
    step.add_argument("--model", required=True)
    step.add_argument("--data", required=True, help="input, target and param.N written by headroom")
    step.add_argument("--loss", choices=("cross-entropy", "cross-entropy-last", "mse", "model"), required=True)
    step.add_argument("--optimizer", choices=("sgd", "adam"), required=True)
    # torch's default is the physical cores, headroom's the logical ones: on a 2-vCPU machine 1 and 2.
    # The threads split reductions (BatchNorm's sums), so comparisons pass headroom's.
    step.add_argument("--threads", type=count_arg(0, 256), default=0, help="torch.set_num_threads (0: torch's default)")
    step.add_argument("--autocast", choices=("fp32", "bf16"), default="fp32",
                      help="forward and loss under torch.autocast('cpu', dtype=torch.bfloat16) (default: fp32, none)")
    step.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                      help="bf16: the model in bfloat16 (model.to(torch.bfloat16)), the loss on float32 logits, the "
                           "optimizer on float32 master weights (default: fp32)")
    step.add_argument("--no-graph-optimize", action="store_true",
                      help="run the module's graph without the graph executor's optimizations, as headroom does")
    step.add_argument("--float64-reference", action="store_true",
                      help="also the float32 gradients' errors from the same step's float64 gradients (fp32 only)")
    step.add_argument("--out", help="JSON file (default: stdout)")
    step.set_defaults(run=cmd_step)

    for name, run, help_text in (("peak", cmd_peak, "peak allocated CPU memory of one training step"),
                                 ("loop", cmd_loop, "samples/s of a plain Python training loop")):
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("--model", required=True)
        sub.add_argument("--input", required=True, type=shape_arg("--input"), action="append",
                         help="one sample's input; repeated for each input forward takes, in its order")
        sub.add_argument("--target", type=shape_arg("--target"))
        sub.add_argument("--batch", required=True, type=count_arg(1, 2 ** 20))
        sub.add_argument("--loss", choices=("cross-entropy", "cross-entropy-last", "mse", "model"), default="cross-entropy")
        sub.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
        sub.add_argument("--threads", type=count_arg(0, 256), default=0, help="torch.set_num_threads (0: torch's default)")
        sub.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
        sub.add_argument("--batchnorm-eval", action="store_true", help="BatchNorm normalizes with running statistics")
        sub.add_argument("--no-dropout", action="store_true", help="dropout modules in eval mode")
        sub.add_argument("--out", help="JSON file (default: stdout)")
        if name == "peak":
            sub.add_argument("--autocast", choices=("fp32", "bf16"), default="fp32",
                             help="forward and loss under torch.autocast('cpu', dtype=torch.bfloat16) (default: fp32, none)")
            sub.add_argument("--no-graph-optimize", action="store_true",
                             help="run the module's graph without the graph executor's optimizations, as headroom does")
        if name == "loop":
            sub.add_argument("--steps", type=count_arg(1, 100000), default=10, help="measured steps (default 10)")
            sub.add_argument("--warmup", type=count_arg(0, 100000), default=2, help="steps not measured (default 2)")
        sub.set_defaults(run=run)

    versions = commands.add_parser("versions", help="Python, torch and torchvision versions as JSON")
    versions.add_argument("--out", help="JSON file (default: stdout)")
    versions.set_defaults(run=cmd_versions)
    return parser


def main():
    args = build_parser().parse_args()
    if isinstance(getattr(args, "input", None), list):
        args.input = Inputs(args.input)
    if getattr(args, "out", None):
        directory = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(directory):
            common.fail(PROG, f"--out: directory '{directory}' does not exist")
        if os.path.exists(args.out) and not os.path.isfile(args.out):
            common.fail(PROG, f"--out: '{args.out}' exists and is not a regular file")
    try:
        args.run(args)
    except UsageError as error:
        common.fail(PROG, str(error))
    except Exception as error:  # a runtime failure (out of memory, an error inside the model): one line too
        common.fail(PROG, f"{type(error).__name__}: {last_line(error)}", 1)


if __name__ == "__main__":
    main()
