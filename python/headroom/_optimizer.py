"""An optimizer as headroom counts it: the text core/optimizer_spec.h reads ("sgd(momentum=0)",
"adam(amsgrad)"), from a torch.optim object, its class and settings, or the text itself."""

import torch

_DEFAULT_SGD_MOMENTUM = 0.9  # what "sgd" alone means, as traces have always meant it
_KINDS = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}


def _momentum_text(momentum):
    return "sgd" if momentum == _DEFAULT_SGD_MOMENTUM else f"sgd(momentum={momentum:g})"


def _text_of(kind, settings, what):
    from . import InputError

    if kind == "sgd":
        momentum = settings.get("momentum", 0.0)  # torch.optim.SGD's default
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not (0 <= momentum < 1):
            raise InputError(f"{what}: SGD's momentum must be a number at least 0 and below 1, got {momentum!r}")
        return _momentum_text(float(momentum))
    return kind + ("(amsgrad)" if settings.get("amsgrad", False) else "")


def spec_text(optimizer, what="optimizer"):
    """The optimizer's text, as a trace records it; InputError for one headroom does not count.

    optimizer: a torch.optim.SGD/Adam/AdamW object (each parameter group's settings read: the state
    they keep must agree), such a class, (class, settings dict), or text ("sgd", "adam(amsgrad)").
    """
    from . import InputError

    if isinstance(optimizer, str):
        if optimizer in ("sgd", "adam", "adamw", "adam(amsgrad)", "adamw(amsgrad)"):
            return optimizer
        if optimizer.startswith("sgd(momentum=") and optimizer.endswith(")"):
            try:
                return _text_of("sgd", {"momentum": float(optimizer[len("sgd(momentum="):-1])}, what)
            except ValueError:
                pass
        raise InputError(f"{what}: unknown optimizer '{optimizer}' (known: sgd, sgd(momentum=M), adam, adam(amsgrad), "
                         "adamw, adamw(amsgrad), or a torch.optim.SGD, Adam or AdamW)")
    settings = {}
    if isinstance(optimizer, tuple) and len(optimizer) == 2 and isinstance(optimizer[1], dict):
        optimizer, settings = optimizer
    if isinstance(optimizer, type):
        kind = _KINDS.get(optimizer)
        if kind is None:
            raise InputError(f"{what}: {optimizer.__name__} is not one headroom counts the state of (SGD, Adam, AdamW)")
        return _text_of(kind, settings, what)
    if isinstance(optimizer, torch.optim.Optimizer):
        kind = _KINDS.get(type(optimizer))
        if kind is None:
            raise InputError(f"{what}: {type(optimizer).__name__} is not one headroom counts the state of "
                             "(SGD, Adam, AdamW)")
        texts = {_text_of(kind, group, what) for group in optimizer.param_groups
                 if any(p.requires_grad for p in group["params"])}
        if len(texts) > 1:
            raise InputError(f"{what}: its parameter groups keep different state ({', '.join(sorted(texts))}); "
                             "headroom counts one setting for every trainable parameter")
        return texts.pop() if texts else _text_of(kind, optimizer.defaults, what)
    raise InputError(f"{what}: expected a torch.optim optimizer, its class, (class, settings) or a name such as "
                     f"'adam', got {type(optimizer).__name__}")


def state_buffers(text):
    """float32 buffers per trainable parameter the optimizer `text` keeps."""
    if text.startswith("sgd"):
        return 0 if text == "sgd(momentum=0)" else 1
    return 3 if text.endswith("(amsgrad)") else 2

