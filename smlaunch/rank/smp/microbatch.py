"""smp's microbatch rules: how ``@smp.step`` arguments are split and how results come back.

Pure tensor bookkeeping, no communication:

* every tensor argument (also inside list/tuple/dict/set) is split along axis 0, or the axis named in
  ``input_split_axes``, into ``microbatches`` equal pieces with ``narrow``; the size must divide
  exactly (smp raises a split error otherwise); arguments named in ``non_split_inputs`` are passed
  whole; objects with ``smp_slice(num_mb, mb, axis)`` slice themselves; a ``StepOutput`` passed in is
  unpacked per microbatch;
* the per-microbatch return values become :class:`StepOutput` leaves inside the same structure.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from smlaunch.rank.smp.config import SMPValidationError


class TensorSplitError(SMPValidationError):
    """A step input cannot be split into equal microbatches."""


class StepOutput:
    """One returned value of an ``@smp.step`` function, per microbatch (smp v1 API)."""

    def __init__(self, outputs: Sequence[Any]) -> None:
        self.outputs = list(outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.outputs)

    def __getitem__(self, i: int) -> Any:
        return self.outputs[i]

    def reduce_sum(self) -> Any:
        total = self.outputs[0]
        for o in self.outputs[1:]:
            total = total + o
        return total

    def reduce_mean(self) -> Any:
        return self.reduce_sum() / len(self.outputs)

    def concat(self) -> torch.Tensor:
        return torch.cat(self.outputs, dim=0)

    def stack(self) -> torch.Tensor:
        return torch.stack(self.outputs)

    def __repr__(self) -> str:
        return f"StepOutput({self.outputs!r})"


def _split_value(value: Any, num_mb: int, mb: int, axis: int, where: str) -> Any:
    if isinstance(value, StepOutput):
        return value.outputs[mb]
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            return value
        size = value.size(axis)
        if size % num_mb:
            raise TensorSplitError(
                f"Cannot split {where} of size {size} along axis {axis} into {num_mb} microbatches: "
                f"the batch size must be divisible by the number of microbatches ({num_mb})."
            )
        step = size // num_mb
        return value.narrow(axis, mb * step, step)
    if hasattr(value, "smp_slice"):
        return value.smp_slice(num_mb, mb, axis)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_split_value(v, num_mb, mb, axis, where) for v in value))
    if isinstance(value, list | tuple | set):
        return type(value)(_split_value(v, num_mb, mb, axis, where) for v in value)
    if isinstance(value, dict):
        return {k: _split_value(v, num_mb, mb, axis, f"{where}[{k!r}]") for k, v in value.items()}
    return value


def split_arguments(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    num_mb: int,
    non_split_inputs: Sequence[str] | None,
    input_split_axes: dict[str, int] | None,
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The (args, kwargs) of every microbatch, by smp's rules."""
    sig = inspect.signature(func)
    bound = sig.bind(*args, **kwargs)
    whole = set(non_split_inputs or ())
    axes = dict(input_split_axes or {})
    unknown = (whole | set(axes)) - set(sig.parameters)
    if unknown:
        raise SMPValidationError(
            f"non_split_inputs/input_split_axes name unknown arguments: {sorted(unknown)}"
        )
    result = []
    for mb in range(num_mb):
        new_args: list[Any] = []
        new_kwargs: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = sig.parameters[name].kind
            if name in whole:
                split = value
            else:
                split = _split_value(value, num_mb, mb, axes.get(name, 0), f"argument {name!r}")
            if kind is inspect.Parameter.VAR_POSITIONAL:
                new_args.extend(split)
            elif kind is inspect.Parameter.VAR_KEYWORD:
                new_kwargs.update(split)
            elif kind is inspect.Parameter.KEYWORD_ONLY:
                new_kwargs[name] = split
            else:
                new_args.append(split)
        result.append((tuple(new_args), new_kwargs))
    return result


def detach_tree(value: Any, detach: bool) -> Any:
    """Detach (when ``detach``) every tensor of a nested result."""
    if isinstance(value, torch.Tensor):
        return value.detach() if detach else value
    if isinstance(value, list | tuple):
        return type(value)(detach_tree(v, detach) for v in value)
    if isinstance(value, dict):
        return {k: detach_tree(v, detach) for k, v in value.items()}
    return value


def map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list | tuple):
        return type(value)(map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    return value


def to_step_outputs(per_mb: Sequence[Any]) -> Any:
    """Transpose per-microbatch results into the returned structure with StepOutput leaves."""
    first = per_mb[0]
    if isinstance(first, tuple | list):
        return type(first)(to_step_outputs([r[i] for r in per_mb]) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: to_step_outputs([r[k] for r in per_mb]) for k in first}
    if first is None:
        return None
    return StepOutput(per_mb)
