"""An nn.Module as headroom's profiler reads it: a TorchScript file, scripted or else traced."""

import hashlib
import io
import os
import sys

import torch


def cache_directory(kind):
    """$XDG_CACHE_HOME/headroom/<kind> (else ~/.cache/headroom/<kind>), made if missing."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(root, "headroom", kind)
    os.makedirs(path, exist_ok=True)
    return path


def as_tuple(inputs):
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def to_torchscript(model, example_inputs, trace_if_unscriptable=True):
    """(path of the module saved as TorchScript, "scripted" or "traced"); (None, "eager") where it
    does not script and `trace_if_unscriptable` is off (capture="auto" runs it eager instead).

    Scripting keeps the module's control flow and is what `headroom profile --torchscript` reads;
    where scripting fails (Python the TorchScript compiler does not take), the module is traced on
    the example inputs instead, which records the path those inputs take. Both keep the submodule
    calls headroom cuts the model into layers at. Raises headroom.InputError where neither works.
    """
    from . import InputError  # the package's error type; imported here to avoid a cycle

    if not isinstance(model, torch.nn.Module):
        raise InputError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if isinstance(model, torch.jit.ScriptModule):
        module, how = model, "scripted"
    else:
        try:
            module, how = torch.jit.script(model), "scripted"
        except Exception as scripting:  # the compiler's errors have no common type
            reason = str(scripting).strip().splitlines()
            if not trace_if_unscriptable:
                print(f"headroom: {type(model).__name__} cannot be scripted ({reason[0] if reason else 'no reason given'}); "
                      "captured in eager PyTorch instead", file=sys.stderr)
                return None, "eager"
            try:
                with torch.no_grad():
                    module = torch.jit.trace(model, as_tuple(example_inputs), check_trace=False)
                how = "traced"
                print(f"headroom: {type(model).__name__} cannot be scripted ({reason[0] if reason else 'no reason given'}); "
                      "traced on the example inputs instead: control flow that depends on the data is fixed to the "
                      "path these inputs took", file=sys.stderr)
            except Exception as tracing:
                traced = str(tracing).strip().splitlines()
                raise InputError(f"model: {type(model).__name__} can be neither scripted "
                                 f"({reason[0] if reason else 'no reason given'}) nor traced "
                                 f"({traced[0] if traced else 'no reason given'})") from None
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    # In a folder of its own, so that the file, and the model's name in the trace, is the class's.
    folder = os.path.join(cache_directory("modules"), digest[:16])
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{type(model).__name__}.pt")
    if not os.path.exists(path):
        temporary = path + f".{os.getpid()}.tmp"
        with open(temporary, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    return path, how


_DTYPES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.int64: "int64", torch.int32: "int32", torch.bool: "bool", torch.uint8: "uint8",
}


def sample_spec(tensor, what):
    """One sample of a batch-first tensor as `--input` takes it: 3x224x224:float32, 128:int64:0-50257."""
    from . import InputError

    if not isinstance(tensor, torch.Tensor):
        raise InputError(f"{what}: expected a tensor (batch first), got {type(tensor).__name__}")
    if tensor.dim() < 1 or tensor.shape[0] < 1:
        raise InputError(f"{what}: expected a batch-first tensor with at least one sample, got shape {tuple(tensor.shape)}")
    if tensor.dtype not in _DTYPES:
        raise InputError(f"{what}: dtype {tensor.dtype} is not one headroom feeds a model")
    shape = "x".join(str(d) for d in tensor.shape[1:]) or "scalar"
    spec = f"{shape}:{_DTYPES[tensor.dtype]}"
    if not tensor.is_floating_point() and tensor.dtype != torch.bool:
        # The values a sample takes, as the example shows them: token ids below the vocabulary.
        low, high = int(tensor.min()), int(tensor.max()) + 1
        spec += f":{min(low, 0)}-{max(high, 1)}"
    return spec
