"""Type stubs of the headroom package (python/headroom/__init__.py holds the docstrings)."""

import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

__version__: str

class Error(Exception): ...
class InputError(Error, ValueError): ...
class Infeasible(Error): ...

class BudgetExceeded(Error, MemoryError):
    layer: str
    phase: str
    micro_batch: int
    requested_bytes: int
    in_use_bytes: int
    budget_bytes: int

class Trace:
    path: str
    how: Optional[str]
    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "Trace": ...
    def save(self, path: Union[str, os.PathLike]) -> "Trace": ...
    def to_dict(self) -> Dict[str, Any]: ...
    @property
    def model(self) -> str: ...
    @property
    def layers(self) -> List[str]: ...

class Plan:
    path: Optional[str]
    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "Plan": ...
    def save(self, path: Union[str, os.PathLike]) -> "Plan": ...
    def to_dict(self) -> Dict[str, Any]: ...
    @property
    def micro_batches(self) -> List[int]: ...
    @property
    def loss_weights(self) -> List[float]: ...
    @property
    def checkpointed_blocks(self) -> List[int]: ...
    @property
    def budget_bytes(self) -> int: ...
    @property
    def global_batch(self) -> int: ...
    @property
    def predicted_peak_bytes(self) -> int: ...
    @property
    def predicted_samples_per_second(self) -> float: ...
    @property
    def precision(self) -> str: ...
    @property
    def trace_path(self) -> str: ...

Tensors = Union[torch.Tensor, Tuple[torch.Tensor, ...]]
# A batch as forward takes it: a tensor, a tuple (positional) or a dict (keyword, `model(**inputs)`).
Inputs = Union[Tensors, Dict[str, Any]]

class Step:
    plan: Plan
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    def __call__(self, inputs: Inputs, targets: Optional[torch.Tensor] = ...) -> float: ...
    def micro_batches(self, inputs: Inputs, targets: Optional[torch.Tensor] = ...) -> Iterator[Tuple[Inputs, Optional[torch.Tensor], float]]: ...
    @property
    def measured_peak_bytes(self) -> Optional[int]: ...
    def report(self) -> Dict[str, Any]: ...
    def save_report(self, path: Union[str, os.PathLike]) -> None: ...
    def remove(self) -> None: ...
    def autocast(self) -> Any: ...

# An optimizer as profile and plan take it: an object, its class, (class, settings) or text.
OptimizerLike = Union[str, torch.optim.Optimizer, type, Tuple[type, Dict[str, Any]]]

def profile(
    model: torch.nn.Module,
    example_inputs: Inputs,
    *,
    batch_sizes: Sequence[int] = ...,
    optimizer: OptimizerLike = ...,
    precision: Union[str, Sequence[str]] = ...,
    depth: Optional[int] = ...,
    layers: Optional[Sequence[str]] = ...,
    loss: Union[str, Callable[[Any, torch.Tensor], torch.Tensor]] = ...,
    example_targets: Optional[torch.Tensor] = ...,
    output_index: Optional[int] = ...,
    capture: str = ...,
    threads: Optional[int] = ...,
    warmup: int = ...,
    repeats: int = ...,
    timing_seconds: float = ...,
    seed: int = ...,
    tempo: bool = ...,
    path: Optional[Union[str, os.PathLike]] = ...,
) -> Trace: ...
def plan(
    trace: Union[Trace, str, os.PathLike],
    budget: Union[int, str],
    batch: int,
    *,
    strategies: Union[str, Sequence[str]] = ...,
    margin: float = ...,
    optimizer: Optional[OptimizerLike] = ...,
    precision: Optional[str] = ...,
    rescale: bool = ...,
) -> Plan: ...
def apply(
    plan: Union[Plan, str, os.PathLike],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Optional[Callable[[Any, torch.Tensor], torch.Tensor]],
    *,
    enforce_budget: bool = ...,
    warmup_steps: int = ...,
) -> Step: ...
