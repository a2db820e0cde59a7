"""A plan run as a step of the user's own training loop (headroom.apply)."""

import contextlib
import json
import statistics
import sys
import time
import types
import weakref

import torch
import torch.utils.checkpoint

from . import BudgetExceeded, InputError, Plan, _core, _core_call, _write_atomically
from ._eager import model_loss, tensors_in


class _Position:
    """Where the step is, for the message of an allocation the budget refuses."""

    def __init__(self):
        self.layer, self.phase, self.micro_batch = "", "", -1


class _Applied:
    """What a model carries while a plan is applied to it: the step, weakly (the model does not keep
    it alive), and nothing in a copy of the model (a copy has no plan applied)."""

    def __init__(self, step):
        self._step = weakref.ref(step)

    def __deepcopy__(self, memo):
        return None

    def __bool__(self):
        return self._step() is not None and self._step()._installed


class Step:
    """The plan as a training step: `loss = step(inputs, targets)`. See headroom.apply."""

    def __init__(self, plan, model, optimizer, loss_fn, *, enforce_budget=True, warmup_steps=1):
        # What the measurements and remove() read, there whatever the checks below refuse.
        self._calls, self._unfinished = 0, 0
        self._peaks, self._seconds, self._losses = [], [], []
        self._hooks, self._forwards = [], {}
        self._threads_before = None
        self._installed = False
        if not isinstance(plan, Plan):
            raise InputError(f"plan: expected a headroom.Plan, got {type(plan).__name__}")
        if not isinstance(model, torch.nn.Module):
            raise InputError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InputError(f"optimizer: expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if loss_fn is not None and not callable(loss_fn):
            raise InputError("loss_fn: expected a callable (output, targets) -> loss, or None where the model "
                             "returns its loss")
        if not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise InputError(f"warmup_steps: expected a number of steps from 0, got {warmup_steps!r}")
        if getattr(model, "_headroom_step", None):
            raise InputError("model: a plan is applied to it already; call remove() on that step first")
        self.plan, self.model, self.optimizer, self.loss_fn = plan, model, optimizer, loss_fn
        self.enforce_budget, self.warmup_steps = enforce_budget, warmup_steps
        document = plan.to_dict()
        self._refuse_what_cannot_run(document)
        self._trace = self._read_trace(document)
        if self._trace["device"].get("kind", "cpu") != "cpu" or any(p.device.type != "cpu" for p in model.parameters()):
            raise InputError("plan: apply enforces budgets on the CPU (its allocator is libtorch's CPU one); "
                             "a CUDA plan or model runs with `headroom execute`")
        layers = [layer for layer in self._trace["layers"] if layer["kind"] != "loss"]
        self._check_model(layers)
        self._warnings = self._check_optimizer(document)
        for warning in self._warnings:
            print(f"headroom: warning: {warning}", file=sys.stderr)
        self._position = _Position()
        self._checkpointed = self._checkpointed_modules(document, layers)
        self._generation = 0  # the step running now, for the micro-batch iterators still around
        self._in_step = False  # between a step's start and its end
        self._said_fp32 = False
        self._pending = False  # a micro-batch iteration waiting for its optimizer step
        self._rehomed = False
        self._original_step = None
        try:
            self._install_hooks(layers)
            self._wrap_optimizer_step()
        except BaseException:
            self.remove()
            raise
        model._headroom_step = _Applied(self)
        self._installed = True
        self._threads = document.get("threads") or self._trace["profile"].get("threads")
        if self._threads:
            # The threads the trace was measured at, for torch and OpenBLAS both, as `execute` runs.
            self._threads_before = (torch.get_num_threads(), _core.blas_threads())
            _core.use_threads(int(self._threads))

    # -- what the plan asks for, checked against what apply can do and the model it is given --

    def _refuse_what_cannot_run(self, document):
        if document.get("l2l"):
            raise InputError("plan: L2L runs in headroom's executor (`headroom execute`), not in a loop of your own")
        if document.get("world_size", 1) > 1 or document.get("data_parallel"):
            raise InputError("plan: a data-parallel plan runs on c10d workers (`headroom execute --devices N`), "
                             "not in a loop of your own")
        if document.get("loss_tiles") or document.get("ring_loss"):
            raise InputError("plan: Inf-CL's tiled loss runs in headroom's executor, not in a loop of your own")
        tempo = [layer.get("name", str(k)) for k, layer in enumerate(document.get("layers", []))
                if layer.get("variant") == "tempo" or layer.get("tempo")]
        if tempo:
            raise InputError(f"plan: Tempo's memory-lean layers ({', '.join(tempo)}) replace headroom's zoo layers; "
                             "a module of your own has none to swap in: plan with --strategies that leave out tempo")
        if self.plan.precision not in ("fp32", "bf16-autocast"):
            raise InputError(f"plan: its step runs in {self.plan.precision}; apply runs fp32 and bf16-autocast plans "
                             "(the command line executes the others: `headroom execute`)")

    def _read_trace(self, document):
        path = document["trace"]["path"]
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            raise InputError(f"plan: its trace {path} cannot be read ({getattr(e, 'strerror', None) or e}): "
                             "plan again from the trace") from None

    def _check_model(self, layers):
        modules = dict(self.model.named_modules())
        for layer in layers:
            # A glue layer is the forward's own code between submodule calls (a residual's add).
            if layer["name"] not in modules and not layer["name"].startswith("glue:"):
                raise InputError(f"plan: it is for model {self._trace['model']['name']}, whose layer {layer['name']} "
                                 f"is not a submodule of this {type(self.model).__name__}")
        # fp32 plans only (above): 4 bytes a parameter in the trace.
        planned = sum(layer["param_bytes"] for layer in layers) // 4
        seen, held = set(), 0
        for p in self.model.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                held += p.numel()
        if planned != held:
            raise InputError(f"plan: it is for model {self._trace['model']['name']} with {planned:,} parameters; "
                             f"this {type(self.model).__name__} has {held:,}")
        # Frozen parameters hold no gradient or optimizer state: the plan counted those it was told of.
        planned_frozen = sum(layer.get("frozen_param_bytes", 0) for layer in layers) // 4
        frozen = sum(p.numel() for p in {id(p): p for p in self.model.parameters()}.values() if not p.requires_grad)
        if planned_frozen != frozen:
            raise InputError(f"plan: it is for model {self._trace['model']['name']} with {planned_frozen:,} frozen "
                             f"parameters; this {type(self.model).__name__} has {frozen:,} (requires_grad False): "
                             "profile the model as it trains")

    def _check_optimizer(self, document):
        """The plan's memory holds for the state of the optimizer it was planned for: an optimizer that
        keeps other state is refused where the budget is enforced, and said where it is not."""
        from ._optimizer import spec_text, state_buffers

        planned = (document.get("static_memory") or {}).get("optimizer") or document.get("optimizer") or \
            self._trace.get("optimizer", {}).get("name", "")
        given = spec_text(self.optimizer)
        if state_buffers(given) == state_buffers(planned):
            return []
        message = (f"the plan is for {planned} ({state_buffers(planned)} state buffers a parameter), and this "
                   f"{type(self.optimizer).__name__} is {given} ({state_buffers(given)}): plan with "
                   "optimizer=this optimizer")
        if self.enforce_budget:
            raise InputError(f"optimizer: {message}")
        return [message + "; the step's peak is not the one predicted"]

    def _checkpointed_modules(self, document, layers):
        by_block = {}
        for layer in layers:
            by_block.setdefault(layer["block"], []).append(layer["name"])
        chosen = []
        for block in document["checkpointed_blocks"]:
            names = by_block.get(block, [])
            if len(names) == 1 and names[0].startswith("glue:"):
                raise InputError(f"plan: block {block} is the forward's own code ({names[0]}), not a submodule; "
                                 "apply checkpoints submodules (the command line runs it: `headroom execute`)")
            if len(names) != 1:
                raise InputError(f"plan: block {block} ({', '.join(names)}) spans {len(names)} submodules; apply "
                                 "checkpoints one submodule at a time (the command line runs it: `headroom execute`)")
            chosen.append(names[0])
        return chosen

    def _install_hooks(self, layers):
        modules = dict(self.model.named_modules())
        position = self._position

        # Under bf16-autocast the step's forward and loss run in an autocast region, and each layer's
        # weight casts leave autocast's cache as the layer ends (what backward keeps stays), as in
        # headroom's profiler and executor, whose every layer is a region of its own
        # (models/model.cpp). With the cache kept to the region's end, resnet18's checkpointed blocks
        # held their casts (docs/results.md, "Autocast regions in the Python package"). The loss is
        # in the region too:
        # cross-entropy then reads the logits in float32, as the executor's loss layer does.
        autocast_layers = self.plan.precision == "bf16-autocast"
        step = self

        def before(name):
            def hook(module, args):
                if step._pending:
                    # A forward after a micro-batch iteration, before any optimizer step: that step
                    # is not coming (accumulation, a skipped step); it ends unmeasured.
                    step._finish_pending()
                position.layer = name
                position.phase = "recompute" if position.phase in ("backward", "recompute") else "forward"
                if autocast_layers and step._in_step and not torch.is_autocast_cpu_enabled() and not step._said_fp32:
                    step._said_fp32 = True
                    warning = (f"layer {name} ran outside autocast in a bf16-autocast step: run the forward and "
                               "loss inside `with step.autocast():`; the prediction is for bf16-autocast")
                    step._warnings.append(warning)
                    print(f"headroom: warning: {warning}", file=sys.stderr)
            return hook

        def after(name):
            def on_gradient(gradient):
                position.layer, position.phase = name, "backward"
            def hook(module, args, output):
                if autocast_layers and step._in_step and torch.is_autocast_cpu_enabled():
                    torch.clear_autocast_cache()
                for t in tensors_in(output):
                    if t.requires_grad:
                        t.register_hook(on_gradient)
                        break
            return hook

        for layer in layers:
            module = modules.get(layer["name"])
            if module is None:  # a glue layer: no module to hook
                continue
            self._hooks.append(module.register_forward_pre_hook(before(layer["name"])))
            self._hooks.append(module.register_forward_hook(after(layer["name"])))
        for name in self._checkpointed:
            module = modules[name]
            # The instance's own forward, if it had one, comes back with remove().
            self._forwards[name] = module.__dict__.get("forward")
            module.forward = types.MethodType(_checkpointed_forward(name, position, self._forwards[name]), module)

    def remove(self):
        """Takes the step's hooks, checkpoints and optimizer wrapper off, gives the process its threads
        back, and lifts any budget left set: model and optimizer run as before apply."""
        _core.allocator_set_limit(0)
        self._pending = False
        self._in_step = False
        self._generation = getattr(self, "_generation", 0) + 1  # an iterator still around lifts nothing now
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        if self._forwards:
            modules = dict(self.model.named_modules())
            for name, before in self._forwards.items():
                if before is None:
                    modules[name].__dict__.pop("forward", None)
                else:
                    modules[name].forward = before
            self._forwards = {}
        if self._original_step is not None:
            # Ours unless something wrapped it since (a scheduler made after apply): then it stays,
            # passing calls through to the step before it.
            mine = self.optimizer.__dict__.get("step")
            if isinstance(mine, types.MethodType) and getattr(mine.__func__, "_headroom_step", None) is self:
                if self._step_was_own:
                    self.optimizer.step = self._original_step
                else:
                    del self.optimizer.step
            self._original_step = None
        if self._installed:
            self.model._headroom_step = None
            self._installed = False
        if self._threads_before:
            torch_threads, blas = self._threads_before
            _core.use_threads(blas if blas > 0 else torch_threads)
            torch.set_num_threads(torch_threads)
            self._threads_before = None

    # -- the step --

    def _rehome(self):
        """Model state made before `import headroom` copied into the counting allocator, once."""
        with torch.no_grad():
            for t in list(self.model.parameters()) + list(self.model.buffers()):
                if not _core.allocator_counts(t):
                    t.data = t.data.clone()
                if isinstance(t, torch.nn.Parameter) and t.grad is not None and not _core.allocator_counts(t.grad):
                    t.grad = t.grad.clone()
        self._rehomed = True

    def _own_bytes(self, tensors):
        """(bytes the allocator counts, bytes it does not) of these tensors' storages, each storage once."""
        counted, uncounted, seen = 0, 0, set()
        for t in tensors:
            storage = t.storage()
            key = storage.data_ptr()
            if key in seen or storage.nbytes() == 0:
                continue
            seen.add(key)
            if _core.allocator_counts(t):
                counted += storage.nbytes()
            else:
                uncounted += storage.nbytes()
        return counted, uncounted

    def _state_tensors(self):
        for p in self.model.parameters():
            yield p
            if p.grad is not None:
                yield p.grad
        yield from self.model.buffers()
        for state in self.optimizer.state.values():
            yield from tensors_in(state)

    def _checked(self, inputs, targets):
        """(inputs as a tuple, or a dict of keyword inputs, and targets), each tensor with the plan's
        batch along dimension 0; targets None where the loss reads none (the model computes it)."""
        if not self._installed:
            raise InputError("step: removed; apply the plan again")
        if isinstance(inputs, dict):
            named = [(f"inputs[{k!r}]", t) for k, t in inputs.items() if isinstance(t, torch.Tensor)]
            if not named:
                raise InputError("inputs: the dict holds no tensor")
        else:
            inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
            if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
                raise InputError("inputs: expected a batch-first tensor, a tuple of them, or a dict (keyword inputs)")
            named = [("inputs" if len(inputs) == 1 else f"inputs[{k}]", t) for k, t in enumerate(inputs)]
        if targets is None and self.loss_fn is not None and not isinstance(inputs, dict):
            raise InputError("targets: loss_fn reads them; give step(inputs, targets)")
        if targets is not None:
            named.append(("targets", targets))
        batch = self.plan.global_batch
        for what, t in named:
            if not isinstance(t, torch.Tensor) or t.dim() < 1 or t.shape[0] != batch:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise InputError(f"{what}: the plan is for a batch of {batch} (batch first), got {shape}")
        return inputs, targets

    def _micro_batch(self, inputs, targets, m):
        """Micro-batch m's inputs and targets, each a tensor of its own, and its loss weight.

        Copied out of the batch, as headroom's executor loads a micro-batch when it starts: the batch
        your loop holds is yours (as a dataset is), and the step's memory is the plan's, one
        micro-batch's input at a time."""
        start = sum(self.plan.micro_batches[:m])
        end = start + self.plan.micro_batches[m]
        if isinstance(inputs, dict):
            part = {k: t[start:end].clone() if isinstance(t, torch.Tensor) else t for k, t in inputs.items()}
        else:
            part = tuple(t[start:end].clone() for t in inputs)
        return (part, None if targets is None else targets[start:end].clone(), self.plan.loss_weights[m])

    def _begin(self):
        """Starts a measured step under the budget; returns its generation."""
        if not self._rehomed:
            self._rehome()
        self._generation += 1
        counted, uncounted = self._own_bytes(list(self._state_tensors()))
        # What the process holds besides the model's state (a dataset, your loop's batch, other
        # models): not the step's.
        self._outside = _core.allocator_in_use() - counted
        self._uncounted = uncounted
        if self.enforce_budget:
            room = self.plan.budget_bytes - counted - uncounted
            if room <= 0:
                raise BudgetExceeded(f"out of memory under the {_core.format_bytes(self.plan.budget_bytes)} budget before the "
                                     f"step: the model's parameters, gradients and optimizer state take "
                                     f"{_core.format_bytes(counted + uncounted)}", "", "data", -1, 0, counted + uncounted,
                                     self.plan.budget_bytes)
            _core.allocator_set_limit(_core.allocator_in_use() + room)
        _core.allocator_clear_refusal()
        _core.allocator_reset_peak()
        self._in_step = True
        self._started = time.perf_counter()
        return self._generation

    def _end(self, loss):
        seconds = time.perf_counter() - self._started
        self._in_step = False
        peak = _core.allocator_peak() - self._outside + self._uncounted
        _core.allocator_set_limit(0)
        self._calls += 1
        if self._calls > self.warmup_steps:
            self._peaks.append(peak)
            self._seconds.append(seconds)
        self._losses.append(loss)

    def _abandon(self, generation):
        """The step of this generation stopped short (an error, an iterator dropped): its limit lifted
        and nothing recorded, unless a later step runs now."""
        if generation == self._generation:
            _core.allocator_set_limit(0)
            self._pending = False
            self._in_step = False

    @contextlib.contextmanager
    def _cut_short(self, generation):
        """A step's own work: if it stops short, the step is abandoned, and a refusal of the budget
        becomes BudgetExceeded."""
        try:
            yield
        except RuntimeError as error:
            self._abandon(generation)
            over = self._over_budget(error)
            if over is not None:
                raise over from None
            raise
        except BaseException:
            self._abandon(generation)
            raise

    def _over_budget(self, error):
        _core.allocator_set_limit(0)
        if "headroom budget" not in str(error):
            return None
        refusal = _core.allocator_last_refusal()
        p = self._position
        where = f" in {p.phase}" if p.phase else ""
        where += f" of {p.layer}" if p.layer else ""
        where += f" (micro-batch {p.micro_batch})" if p.micro_batch >= 0 else ""
        if refusal is None:  # refused on another thread (an intra-op worker): its own words
            line = str(error).strip().splitlines()[0]
            return BudgetExceeded(f"out of memory under the {_core.format_bytes(self.plan.budget_bytes)} budget{where}: {line}",
                                  p.layer, p.phase, p.micro_batch, 0, 0, self.plan.budget_bytes)
        requested, in_use, _ = refusal
        step_in_use = in_use - self._outside + self._uncounted
        return BudgetExceeded(f"out of memory under the {_core.format_bytes(self.plan.budget_bytes)} budget{where}: "
                              f"{_core.format_bytes(requested)} requested with {_core.format_bytes(step_in_use)} in use",
                              p.layer, p.phase, p.micro_batch, requested, step_in_use, self.plan.budget_bytes)

    def _loss(self, output, targets):
        """loss_fn's, or where there is none the model's own: `output.loss`, `output["loss"]`, its
        first element, or the output."""
        if self.loss_fn is not None:
            return self.loss_fn(output, targets)
        try:
            return model_loss(output)
        except ValueError as e:
            raise InputError(f"loss_fn: None, and {e}") from None

    def __call__(self, inputs, targets=None):
        """One training step of the plan on a whole batch; returns the batch's loss. `inputs`: a
        tensor, a tuple of them, or a dict (`model(**inputs)`); `targets` None where the loss reads
        none (loss_fn None: the model returns its loss)."""
        self._finish_pending()
        inputs, targets = self._checked(inputs, targets)
        generation = self._begin()
        total = 0.0
        count = len(self.plan.micro_batches)
        with self._cut_short(generation):
            self.optimizer.zero_grad(set_to_none=False)
            for m in range(count):
                self._position.micro_batch, self._position.phase, self._position.layer = m, "data", ""
                micro_inputs, micro_targets, weight = self._micro_batch(inputs, targets, m)
                self._position.phase = "forward"
                with self.autocast():  # forward and loss; backward outside, as PyTorch's AMP runs
                    output = self.model(**micro_inputs) if isinstance(micro_inputs, dict) else self.model(*micro_inputs)
                    self._position.layer = "loss"
                    loss = self._loss(output, micro_targets) * weight
                del output
                self._position.phase = "backward"
                loss.backward()
                total += float(loss.detach())
                del loss
                if m + 1 < count:  # the last micro-batch's input stays through the optimizer's step, as planned
                    del micro_inputs, micro_targets
            self._position.phase, self._position.layer, self._position.micro_batch = "optimizer", "", -1
            self.optimizer.step()  # through whatever wraps it (a scheduler's count)
            del micro_inputs, micro_targets
        self._end(total)
        return total

    def autocast(self):
        """The plan's precision as a context for a micro-batch's forward and loss (backward outside):
        torch.autocast to bfloat16 under a bf16-autocast plan, autocast off under fp32. The step's own
        calls use it; a loop that iterates micro_batches() wraps its forward and loss in it."""
        if self.plan.precision == "bf16-autocast":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return torch.autocast("cpu", enabled=False)  # an fp32 plan, inside a loop's own autocast too

    def micro_batches(self, inputs, targets=None):
        """Yields (inputs, targets, loss weight) per micro-batch, for a loop that runs its own backward.

        Multiply each micro-batch's loss by its weight before backward (the gradients then add up to
        the whole batch's), run forward and loss inside `with step.autocast():` (the plan's
        precision), and call the optimizer's step() after the last, as always. The gradients
        are zeroed first. The budget holds, and the peak is measured, from the first micro-batch to
        the end of that optimizer step. An allocation the budget refuses in your own code (your
        forward and backward) raises torch's error, "headroom budget: allocating ..."; one in the
        optimizer's step, BudgetExceeded. A step whose optimizer step never comes is not measured.
        """
        self._finish_pending()
        inputs, targets = self._checked(inputs, targets)
        generation = self._begin()
        try:
            self.optimizer.zero_grad(set_to_none=False)
            for m in range(len(self.plan.micro_batches)):
                self._position.micro_batch, self._position.phase, self._position.layer = m, "data", ""
                part = self._micro_batch(inputs, targets, m)
                self._position.phase = "forward"
                yield part
                del part
                if generation != self._generation:
                    raise InputError("micro_batches: another step started (or remove() ran) before this "
                                     "iteration ended; its micro-batches stop here")
        except BaseException:  # an error in the loop's code, or the iterator dropped before its end
            self._abandon(generation)
            raise
        # The optimizer's step, which the loop calls next, ends the measured step.
        if generation == self._generation:
            self._position.phase, self._position.layer, self._position.micro_batch = "optimizer", "", -1
            self._pending = True

    def _finish_pending(self):
        """A micro-batch iteration whose optimizer step never came: not measured (its time and peak
        would hold whatever the loop did since); the call counts as run."""
        if self._pending:
            self._pending = False
            self._in_step = False
            _core.allocator_set_limit(0)
            self._calls += 1
            self._unfinished += 1

    def _wrap_optimizer_step(self):
        """The optimizer's step, bound to it, ends a micro-batch iteration's measured step. Marked as a
        scheduler's counter where the step it wraps was one, so a scheduler made before apply goes on;
        one made after wraps it as any step."""
        optimizer = self.optimizer
        self._step_was_own = "step" in optimizer.__dict__
        original = self._original_step = optimizer.step
        step_of = self

        def step(opt, *args, **kwargs):
            if not step_of._pending or opt is not step_of.optimizer:
                return original(*args, **kwargs)
            step_of._pending = False
            with step_of._cut_short(step_of._generation):
                result = original(*args, **kwargs)
            step_of._end(float("nan"))
            return result

        step._headroom_step = self
        if getattr(original, "_with_counter", False):
            step._with_counter = True
        optimizer.step = types.MethodType(step, optimizer)

    # -- what was measured --

    @property
    def measured_peak_bytes(self):
        """The highest measured peak over the steps after warm-up (None before one)."""
        return max(self._peaks) if self._peaks else None

    def report(self):
        """The run as `headroom execute` reports it (schema headroom.report/1): a dict."""
        document = self.plan.to_dict()
        predicted = document["predicted"]
        measured_steps = len(self._seconds)
        median = statistics.median(self._seconds) if self._seconds else 0.0
        peak = max(self._peaks) if self._peaks else 0
        samples_per_second = self.plan.global_batch / median if median > 0 else 0.0
        report = {
            "schema": "headroom.report/1",
            "plan": self.plan.path or "",
            "model": self._trace["model"]["name"],
            "device": {"kind": self._trace["device"].get("kind", "cpu"), "name": self._trace["device"].get("name", "")},
            "budget_bytes": self.plan.budget_bytes if self.enforce_budget else 0,
            "global_batch": self.plan.global_batch,
            "micro_batches": self.plan.micro_batches,
            "checkpointed_blocks": self.plan.checkpointed_blocks,
            "steps": measured_steps,
            "status": "ok",
            "predicted": {"peak_bytes": predicted["peak_bytes"], "samples_per_second": predicted["samples_per_second"],
                          "step_seconds": predicted["step_seconds"]},
            "measured": {"peak_bytes": peak, "samples_per_second": samples_per_second, "step_seconds": median},
            "errors": {"peak_rel": (predicted["peak_bytes"] - peak) / peak if peak else 0.0,
                       "throughput_rel": ((predicted["samples_per_second"] - samples_per_second) / samples_per_second
                                          if samples_per_second else 0.0)},
            "gradient_check": {"computed": False,
                               "note": "your own loop's step (headroom.apply): compare with a whole-batch step yourself"},
            "warnings": list(document.get("warnings", [])),
            "step_seconds": list(self._seconds),
            "threads": int(self._threads or torch.get_num_threads()),
            "data": "your own loop's batches",
        }
        if self._unfinished:
            report["warnings"].append(f"{self._unfinished} step(s) through micro_batches() whose optimizer step did "
                                      "not come were not measured")
        report["warnings"] = self._warnings + report["warnings"]
        if self.plan.precision != "fp32":
            report["precision"] = self.plan.precision
        return json.loads(_core_call(_core.report_json, json.dumps(report)))

    def save_report(self, path):
        """Writes report() where `headroom compare` reads it."""
        _write_atomically(path, json.dumps(self.report(), indent=1) + "\n")

    def __repr__(self):
        if not self._peaks:
            return (f"headroom step for {self._trace['model']['name']}: {self._calls} step(s) run, "
                    f"{self.warmup_steps} of them warm-up; nothing measured yet")
        return _core_call(_core.render_report, json.dumps(self.report()))


def _checkpointed_forward(name, position, instance_forward=None):
    """A submodule's forward through torch.utils.checkpoint, as a function to bind to the submodule
    (so that a deep copy of the model checkpoints its own copy). Its first run is the forward, a
    second the recompute in backward: named so for a budget's refusal. `instance_forward`: a forward
    the submodule had of its own (set on the instance), run instead of its class's."""

    def forward(module, *args, **kwargs):
        runs = [0]

        def run(*inner):
            runs[0] += 1
            if runs[0] > 1:
                position.layer, position.phase = name, "recompute"
            if instance_forward is not None:
                return instance_forward(*inner, **kwargs)
            return type(module).forward(module, *inner, **kwargs)

        return torch.utils.checkpoint.checkpoint(run, *args, use_reentrant=False)

    return forward
