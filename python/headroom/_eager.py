"""A module captured as it runs in eager PyTorch (headroom.profile(capture="eager")): nothing is
compiled. One run of the example batch finds the layers (the submodule calls at the chosen depth),
which layer's output each reads, and what each keeps for backward (through
torch.autograd.graph.saved_tensors_hooks); the profiler then runs the module's own forward on
synthetic batches, each layer's call reported to it by forward hooks, and measures it with the same
counting allocator and clocks as any other model (python/eager_capture.cpp)."""

import dataclasses

import torch
from torch.nn import functional as F

MAX_DEPTH = 16  # as the TorchScript cut's (models/script_graph.h)
DEFAULT_LAYERS = 8  # the default depth is the shallowest with this many layers holding parameters
_MODEL_INPUT, _TARGET = -1, -2


def _input_id(k):
    """core::model_input_id: the batch's k-th input as a layer's input."""
    return _MODEL_INPUT if k == 0 else -2 - k


def _storage(t):
    """The address of a tensor's storage: a view and its base share it."""
    return (t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()).data_ptr()


def tensors_in(value):
    """The tensors in a value as a forward takes or returns them, in order."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from tensors_in(getattr(value, field.name))


def model_loss(outputs):
    """The loss a model returns: `outputs.loss`, `outputs["loss"]`, the first element, or the output."""
    loss = outputs if isinstance(outputs, torch.Tensor) else getattr(outputs, "loss", None)
    if loss is None and isinstance(outputs, dict):
        loss = outputs.get("loss")
    if loss is None and isinstance(outputs, (tuple, list)) and outputs:
        loss = outputs[0]
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError(f"the model's output ({type(outputs).__name__}) holds no loss: expected .loss, "
                         "[\"loss\"], a first element or a tensor of one number")
    return loss


class Inputs:
    """How the example inputs call forward: a tensor, a tuple (positional) or a dict (keyword, its
    tensors the batch's inputs and its other values passed as they are)."""

    def __init__(self, example_inputs, error):
        if isinstance(example_inputs, dict):
            self.names = [k for k, v in example_inputs.items() if isinstance(v, torch.Tensor)]
            self.constants = {k: v for k, v in example_inputs.items() if not isinstance(v, torch.Tensor)}
            if not self.names:
                raise error("example_inputs: the dict holds no tensor")
            if not all(isinstance(k, str) for k in example_inputs):
                raise error("example_inputs: a dict's keys are forward's keyword arguments (text)")
            self.examples = [example_inputs[k] for k in self.names]
        else:
            self.names, self.constants = None, {}
            self.examples = list(example_inputs) if isinstance(example_inputs, (tuple, list)) else [example_inputs]

    def call(self, model, tensors):
        if self.names is None:
            return model(*tensors)
        return model(**dict(zip(self.names, tensors)), **self.constants)

    def what(self, k):
        if self.names is not None:
            return f"example_inputs[{self.names[k]!r}]"
        return "example_inputs" if len(self.examples) == 1 else f"example_inputs[{k}]"


@dataclasses.dataclass
class Layer:
    name: str  # the submodule's path
    kind: str  # its class ("(batchnorm)" where it holds one, as the TorchScript cut names it)
    inputs: list  # earlier layers' ids, or the batch's inputs (_input_id), or _TARGET
    block: int = -1
    parameters: list = dataclasses.field(default_factory=list)
    saves_inputs: list = dataclasses.field(default_factory=list)
    keeps_output: bool = False


def _is_batchnorm(module):
    return isinstance(module, torch.nn.modules.batchnorm._BatchNorm)


class _Calls:
    """The module calls one forward makes, outermost first: (path, parent call or None) per call."""

    def __init__(self, model, run):
        self.paths = {id(m): name for name, m in model.named_modules()}
        self.calls, stack, handles = [], [], []

        def before(module, args):
            self.calls.append((self.paths.get(id(module)), stack[-1] if stack else None))
            stack.append(len(self.calls) - 1)

        def after(module, args, output):
            stack.pop()

        for module in model.modules():
            handles.append(module.register_forward_pre_hook(before))
            handles.append(module.register_forward_hook(after))
        try:
            run()
        finally:
            for handle in handles:
                handle.remove()

    def layers_at(self, is_layer):
        """Indices of the calls that are layers: those `is_layer(path)` takes, not inside another."""
        chosen, inside = [], set()
        for k, (path, parent) in enumerate(self.calls):
            if parent is not None and parent in inside:
                inside.add(k)
                continue
            if path is not None and is_layer(path):
                chosen.append(k)
                inside.add(k)
        return chosen


def _depth(path):
    return 0 if path == "" else path.count(".") + 1


class EagerCapture:
    """The module as the profiler runs it (python/eager_capture.cpp reads these attributes): its
    layers, their saves, the batch's specs, and run(), its forward on a batch with each layer's call
    reported to the profiler's observer."""

    def __init__(self, model, example_inputs, *, loss, depth, layers, output_index, example_targets, error):
        from ._scripting import sample_spec

        self.model, self.error = model, error
        self.inputs = Inputs(example_inputs, error)
        self.input_specs = [sample_spec(t, self.inputs.what(k)) for k, t in enumerate(self.inputs.examples)]
        self.loss = loss
        self.output_index = output_index
        self.name = type(model).__name__
        self._modules = dict(model.named_modules())
        self._reporting = None  # the observer while run() runs
        examples = [t.detach().clone() for t in self.inputs.examples]  # storages of their own: edges are by storage
        was_training = model.training
        model.train()
        try:
            paths = self._choose_layers(examples, depth, layers)
            output = self._find_edges_and_saves(examples, paths)
            self.target_spec = self._target_spec(output, example_targets)
            self._add_loss_layer(output)
            self.data_dependent = self._differing_layers(examples[0].shape[0], paths)
        finally:
            model.train(was_training)
        self._assign_blocks()
        self._attribute_parameters()
        self.config = self._config(depth, layers, paths)
        self._hooks = self._install_reporting(paths)

    # -- which submodules are the layers --

    def _choose_layers(self, examples, depth, layers):
        with torch.no_grad():
            calls = _Calls(self.model, lambda: self.inputs.call(self.model, examples))
        if layers:
            named = set(layers)
            missing = [p for p in layers if p not in self._modules]
            if missing:
                raise self.error(f"--layers: {missing[0]} is not a submodule of {self.name}")
            chosen = calls.layers_at(lambda path: path in named)
            called = [calls.calls[k][0] for k in chosen]
            for path in layers:
                if path not in called:
                    raise self.error(f"--layers: {path} is not called by {self.name}'s forward (or only inside "
                                     "another layer named)")
            self._check_once(called, "--layers")
            return called
        if depth is not None:
            if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= MAX_DEPTH:
                raise self.error(f"--depth: '{depth}' is not a depth from 1 to {MAX_DEPTH} (1: the module's children)")
            called = self._called_at(calls, depth)
            self._check_once(called, "--depth")
            self.depth = depth
            return called
        best = None
        for d in range(1, MAX_DEPTH + 1):
            called = self._called_at(calls, d)
            if len(set(called)) != len(called):
                break  # a layer called more than once: not deeper than the last depth that had none
            if best is not None and called == best[1]:
                break
            best = (d, called)
            if sum(1 for p in called if any(True for _ in self._modules[p].parameters())) >= DEFAULT_LAYERS:
                break
        if best is None:
            called = self._called_at(calls, 1)
            self._check_once(called, "--depth")
        self.depth = best[0]
        return best[1]

    def _called_at(self, calls, depth):
        """The cut at `depth`, as the TorchScript cut makes it: containers above the depth are looked
        into, a submodule at the depth (or one without children above it) is a layer."""
        def is_layer(path):
            module = self._modules[path]
            return path != "" and (_depth(path) >= depth or not any(True for _ in module.children()))
        called = [calls.calls[k][0] for k in calls.layers_at(is_layer)]
        if not called:
            raise self.error(f"model: {self.name}'s forward calls no submodule: headroom measures a module "
                             "layer by layer, at its submodules")
        return called

    def _check_once(self, called, flag):
        for path in called:
            if called.count(path) > 1:
                raise self.error(f"{flag}: {path} is called {called.count(path)} times in one forward, and a layer is "
                                 "one call: pick layers above it (a shallower --depth, or --layers)")

    # -- what each layer reads and keeps --

    def _find_edges_and_saves(self, examples, paths):
        """One step's forward with the layers watched: each layer's inputs (the tensors its call is
        given, traced to the layer or batch input whose storage they are; one made by the forward's
        own code between calls, to the layer that ran last) and which of them, and whether its output,
        its backward keeps."""
        producer = {_storage(t): _input_id(k) for k, t in enumerate(examples)}
        # Every layer output stays alive through this run: a freed one's address could be taken by a
        # later tensor, which its producer's entry would then claim.
        outputs_alive = []
        index = {path: i for i, path in enumerate(paths)}
        self.layers, self._saved_counts = [], []
        current, saved, handles = [None], [], []
        state = {"last": _input_id(0)}

        def before(path):
            def hook(module, args):
                i = len(self.layers)
                if index.get(path) != i:
                    return
                slots, storages = [], []
                for t in tensors_in(args):
                    # One the forward's own code made since the last layer (tanh(x), a mask) reads what
                    # that layer made; kept for backward, it is this layer's (its interval made it), not
                    # that layer's output.
                    known = _storage(t) in producer
                    source = producer[_storage(t)] if known else state["last"]
                    if source not in slots:
                        slots.append(source)
                        storages.append(set())
                    if known:
                        storages[slots.index(source)].add(_storage(t))
                if not slots:
                    slots, storages = [state["last"]], [set()]
                kind = type(module).__name__ + (" (batchnorm)" if any(_is_batchnorm(m) for m in module.modules()) else "")
                self.layers.append(Layer(path, kind, slots))
                self.layers[-1]._storages = storages
                saved.append(set())
                self._saved_counts.append(0)
                current[0] = i
            return hook

        def after(path):
            def hook(module, args, output):
                i = current[0]
                if i is None or self.layers[i].name != path:
                    return
                current[0] = None
                tensors = list(tensors_in(output))
                if not tensors:
                    raise self.error(f"model: layer {path} returns no tensor ({type(output).__name__})")
                outputs_alive.extend(tensors)
                for t in tensors:
                    producer.setdefault(_storage(t), i)
                self.layers[i]._output = _storage(tensors[0])
                state["last"] = i
            return hook

        def pack(t):
            if current[0] is not None:
                self._saved_counts[current[0]] += 1
                try:
                    saved[current[0]].add(_storage(t))
                except RuntimeError:  # a tensor without storage (sparse, nested): not an input's
                    pass
            return t

        for path in paths:
            handles.append(self._modules[path].register_forward_pre_hook(before(path)))
            handles.append(self._modules[path].register_forward_hook(after(path)))
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                output = self.inputs.call(self.model, examples)
        finally:
            for handle in handles:
                handle.remove()
        for i, layer in enumerate(self.layers):
            inputs = set().union(*layer._storages)
            layer.saves_inputs = [bool(s & saved[i]) for s in layer._storages]
            layer.keeps_output = layer._output in saved[i] and layer._output not in inputs
        self._producer = producer
        return output

    def _saved_per_layer(self, tensors, paths):
        """How many tensors each layer's call saves for backward on this batch."""
        counts, current, handles = [0] * len(paths), [None], []

        def pack(t):
            if current[0] is not None:
                counts[current[0]] += 1
            return t

        for i, path in enumerate(paths):
            module = self._modules[path]
            handles.append(module.register_forward_pre_hook(lambda m, args, i=i: current.__setitem__(0, i)))
            handles.append(module.register_forward_hook(lambda m, args, out: current.__setitem__(0, None)))
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                self.inputs.call(self.model, tensors)
        finally:
            for handle in handles:
                handle.remove()
        return counts

    def _differing_layers(self, batch, paths):
        """The layers that save another number of tensors for a synthetic batch of the example's size,
        drawn as the profiler draws its batches, than for the example batch (control flow that depends
        on the data): they are measured as the synthetic batches run them."""
        from . import _core

        synthetic, _ = _core.synthetic_batch(self.input_specs, "", batch, 0)
        counts = self._saved_per_layer(synthetic, paths)
        return [path for path, x, y in zip(paths, self._saved_counts, counts) if x != y]

    # -- the loss --

    def _loss_output(self, output):
        """The tensor a loss of headroom's reads: `output_index`'s element, `.logits`, or the first."""
        if isinstance(output, torch.Tensor):
            return output
        if self.output_index is not None:
            try:
                return output[self.output_index]
            except (IndexError, KeyError, TypeError):
                raise self.error(f"--output-index: the model returns {type(output).__name__}, which has no element "
                                 f"{self.output_index}") from None
        logits = getattr(output, "logits", None)
        if logits is None and isinstance(output, dict):
            logits = output.get("logits")
        if isinstance(logits, torch.Tensor):
            return logits
        first = next(tensors_in(output), None)
        if first is None:
            raise self.error(f"model: {self.name}'s output ({type(output).__name__}) holds no tensor for the loss")
        return first

    def _target_spec(self, output, example_targets):
        from ._scripting import sample_spec

        if self.loss == "model":
            if example_targets is not None:
                raise self.error("example_targets: with loss=\"model\" the model computes the loss from its inputs")
            try:
                model_loss(output)
            except ValueError as e:
                raise self.error(f"loss: {e}") from None
            return ""
        if example_targets is not None:
            return sample_spec(example_targets, "example_targets")
        if callable(self.loss):
            raise self.error("example_targets: a loss function of your own needs a batch-first target to read")
        from . import _core, _core_call

        loss, class_dim = {"cross-entropy": ("cross-entropy", "1"), "cross-entropy-last": ("cross-entropy", "last"),
                           "mse": ("mse", "")}[self.loss]
        return _core_call(_core.target_for_output, loss, class_dim, self._loss_output(output).detach())

    def _add_loss_layer(self, output):
        if self.loss == "model":
            return
        last = self._producer.get(_storage(self._loss_output(output)), len(self.layers) - 1)
        layer = Layer("loss", "loss", [last if last >= 0 else len(self.layers) - 1, _TARGET])
        # What the loss's backward keeps of the output it reads and of the target.
        from . import _core

        _, target = _core.synthetic_batch(self.input_specs, self.target_spec, self.inputs.examples[0].shape[0], 0)
        saved = set()

        def pack(t):
            saved.add(_storage(t))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            self.compute_loss(output, target)
        layer.saves_inputs = [_storage(self._loss_output(output)) in saved, _storage(target) in saved]
        self.layers.append(layer)

    def compute_loss(self, output, target):
        if self.loss == "model":
            return model_loss(output)
        if callable(self.loss):
            return self.loss(output, target)
        out = self._loss_output(output)
        if self.loss == "cross-entropy-last":
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
        if self.loss == "cross-entropy":
            return F.cross_entropy(out, target)
        return F.mse_loss(out, target)

    # -- blocks and parameters --

    def _assign_blocks(self):
        """Blocks as the TorchScript cut makes them: a block ends where one layer's output carries
        everything the later layers read of the earlier ones (the batch's inputs aside)."""
        layers = [layer for layer in self.layers if layer.kind != "loss"]
        block = 0
        for i, layer in enumerate(layers):
            layer.block = block
            crossing = {source for later in layers[i + 1:] for source in later.inputs if 0 <= source <= i}
            if crossing <= {i}:
                block += 1

    def _attribute_parameters(self):
        """Each parameter to the first layer that holds it; any no layer holds to the first layer."""
        taken = set()
        for layer in self.layers:
            if layer.kind == "loss":
                continue
            for p in self._modules[layer.name].parameters():
                if id(p) not in taken:
                    taken.add(id(p))
                    layer.parameters.append(p)
        for p in self.model.parameters():
            if id(p) not in taken:
                taken.add(id(p))
                self.layers[0].parameters.append(p)

    def _config(self, depth, layers, paths):
        config = {"input": ",".join(self.input_specs), "loss": self.loss if isinstance(self.loss, str) else "function"}
        if self.inputs.names is not None:
            config["input_names"] = ",".join(self.inputs.names)
        if self.target_spec:
            config["target"] = self.target_spec
        if layers:
            config["layers"] = ",".join(paths)
        else:
            config["depth"] = str(self.depth)
        if self.output_index is not None:
            config["output_index"] = str(self.output_index)
        # Python's control flow is not recorded, only run: what the profile measured is the path the
        # synthetic batches took.
        config["control_flow"] = "as the profiled (synthetic) batches ran it"
        if self.data_dependent:
            config["control_flow"] += (f"; {', '.join(self.data_dependent)} ran otherwise on the example batch "
                                       "(it depends on the data)")
        return config

    # -- the profiler's run --

    def _install_reporting(self, paths):
        """Forward hooks that tell the profiler's observer, while run() runs, where each layer ends;
        a call out of the captured order is refused. A layer starts where the one before it ended
        (the first where forward starts): the forward's own code between two calls (a residual's add,
        a mask) is the next layer's, as the TorchScript cut runs it with the next call."""
        capture, handles, count = self, [], len(self.layers)

        def before(i):
            def hook(module, args):
                r = capture._reporting
                if r is None:
                    return
                if r["next"] != i:
                    capture._out_of_order(i, r["next"])
                r["next"] = i + 1
            return hook

        def after(i):
            def hook(module, args, output):
                r = capture._reporting
                if r is not None:
                    r["observer"].after(i, next(tensors_in(output)))
                    if i + 1 < count:
                        r["observer"].before(i + 1)
            return hook

        for i, path in enumerate(paths):
            handles.append(self._modules[path].register_forward_pre_hook(before(i)))
            handles.append(self._modules[path].register_forward_hook(after(i)))
        return handles

    def _out_of_order(self, i, expected):
        names = [layer.name for layer in self.layers]
        wanted = names[expected] if expected < len(names) else "none (the forward had ended)"
        raise self.error(f"model: {self.name}'s forward called {names[i]} where the example batch called {wanted}: "
                         "its control flow depends on the data at this depth; pick layers that hold it "
                         "(a shallower depth, or layers=...)")

    def run(self, tensors, target, observer):
        """The module's forward and loss on a batch, each layer reported to `observer`; the loss."""
        self._reporting = {"next": 0, "observer": observer}
        try:
            observer.before(0)
            output = self.inputs.call(self.model, tensors)
            layers = len(self.layers) - (0 if self.loss == "model" else 1)
            if self._reporting["next"] != layers:
                raise self.error(f"model: {self.name}'s forward called {self._reporting['next']} of the {layers} layers "
                                 "the example batch called: its control flow depends on the data at this depth; "
                                 "pick layers that hold it (a shallower depth, or layers=...)")
            if self.loss == "model":
                return model_loss(output)
            loss = self.compute_loss(output, target)
            del output
            observer.after(layers, loss)
            return loss
        finally:
            self._reporting = None

    def named_parameters(self):
        return list(self.model.named_parameters())

    def buffers(self):
        return list(self.model.buffers())

    def set_modes(self, training, dropout, batchnorm_eval):
        self.model.train(training)
        for module in self.model.modules():
            if isinstance(module, torch.nn.modules.dropout._DropoutNd) and not dropout:
                module.eval()
            if _is_batchnorm(module) and batchnorm_eval:
                module.eval()

    def close(self):
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
