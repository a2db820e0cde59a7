"""What the example scripts share: finding a Python that has Debian's torch, and the SHAPE:DTYPE syntax
`headroom profile --torchscript` reads. Standard library only, so that it can run before torch is found.
"""

import os
import re
import sys

# Debian's python3-torch installs into /usr/lib/python3/dist-packages, which only the system interpreter
# reads. A python3 earlier on PATH (pyenv, a virtualenv) does not see it, so the scripts re-run themselves
# with this one rather than fail on a machine where `./scripts/install-deps.sh --with-pytorch` did its job.
SYSTEM_PYTHON = "/usr/bin/python3"
_REEXEC_MARK = "HEADROOM_EXAMPLES_REEXEC"

# Exit status when torch cannot be imported at all: automake's and ctest's "skipped", so a test driving
# these scripts can tell "PyTorch is not installed here" from a failure.
EXIT_NO_TORCH = 77
EXIT_USAGE = 2


def fail(prog, message, status=EXIT_USAGE):
    """One line on stderr naming what is wrong, then exit (2 = bad input or usage, as headroom does)."""
    print(f"{prog}: {message}", file=sys.stderr)
    sys.exit(status)


def require_torch(prog):
    """Imports torch (and returns it), re-running the script with the system Python when needed."""
    try:
        import torch  # noqa: F401
        return torch
    except ImportError as error:
        reason = str(error)
    if (os.path.exists(SYSTEM_PYTHON) and not os.environ.get(_REEXEC_MARK)
            and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON)):
        os.environ[_REEXEC_MARK] = "1"
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
    fail(prog, f"cannot import torch ({reason}); install Debian's python3-torch and python3-torchvision "
               f"with `./scripts/install-deps.sh --with-pytorch` and run with {SYSTEM_PYTHON}", EXIT_NO_TORCH)


def require_torchvision(prog):
    """Imports torchvision (and returns it) after require_torch, or exits 77 saying how to install it."""
    try:
        import torchvision
        return torchvision
    except ImportError as error:
        fail(prog, f"cannot import torchvision ({error}); run `./scripts/install-deps.sh --with-pytorch`", EXIT_NO_TORCH)


# The dtypes headroom's --input/--target accept; integer ones need a value range for synthetic data.
FLOAT_DTYPES = ("float32", "float64")
INT_DTYPES = ("int64", "int32")
_SPEC = re.compile(r"^(?P<dims>[0-9]+(?:x[0-9]+)*):(?P<dtype>[a-z0-9]+)(?::(?P<lo>-?[0-9]+)-(?P<hi>-?[0-9]+))?$")


class ShapeSpec:
    """A per-sample shape and dtype, `3x224x224:float32` or `128:int64:0-8192` (integers in [lo, hi))."""

    def __init__(self, dims, dtype, low=None, high=None):
        self.dims = tuple(dims)
        self.dtype = dtype
        self.low = low
        self.high = high

    def __str__(self):
        # A per-sample scalar (cross-entropy's target for a [B, C] output) has no dims to join.
        text = ("x".join(str(d) for d in self.dims) or "scalar") + ":" + self.dtype
        if self.low is not None:
            text += f":{self.low}-{self.high}"
        return text

    def torch_dtype(self, torch):
        return getattr(torch, self.dtype)

    def make(self, torch, batch, generator=None):
        """A synthetic batch of this shape: standard normal floats, uniform integers in [lo, hi)."""
        shape = (batch,) + self.dims
        if self.dtype in INT_DTYPES:
            return torch.randint(self.low, self.high, shape, generator=generator, dtype=self.torch_dtype(torch))
        return torch.randn(shape, generator=generator, dtype=self.torch_dtype(torch))


def parse_shape(text, flag):
    """Parses SHAPE:DTYPE[:LO-HI]; raises ValueError with a message naming the flag."""
    match = _SPEC.match(text)
    if not match:
        raise ValueError(f"{flag}: '{text}' is not SHAPE:DTYPE (per-sample dims joined by 'x', e.g. "
                         f"3x224x224:float32, or 128:int64:0-8192 for integers in [0, 8192))")
    dims = [int(d) for d in match["dims"].split("x")]
    if any(d <= 0 for d in dims):
        raise ValueError(f"{flag}: '{text}' has a dimension that is not positive")
    if any(d > 2 ** 20 for d in dims):
        raise ValueError(f"{flag}: '{text}' has a dimension larger than 2^20")
    dtype = match["dtype"]
    if dtype not in FLOAT_DTYPES + INT_DTYPES:
        raise ValueError(f"{flag}: dtype '{dtype}' is not supported (known: {', '.join(FLOAT_DTYPES + INT_DTYPES)})")
    low = high = None
    if match["lo"] is not None:
        if dtype not in INT_DTYPES:
            raise ValueError(f"{flag}: a value range ({match['lo']}-{match['hi']}) applies to integer dtypes only")
        low, high = int(match["lo"]), int(match["hi"])
        if low >= high:
            raise ValueError(f"{flag}: empty value range {low}-{high} (integers are drawn from [lo, hi))")
    elif dtype in INT_DTYPES:
        raise ValueError(f"{flag}: integer input '{text}' needs a value range, e.g. {match['dims']}:{dtype}:0-1000")
    return ShapeSpec(dims, dtype, low, high)
