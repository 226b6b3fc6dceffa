"""Which block of the model runs on which pipeline stage.

The engine pipelines models whose forward is a linear chain of blocks: an ``nn.Sequential`` whose
top-level children are the blocks, or any module whose forward only chains its children (checked by
one probe call, :func:`blocks_of`) (torch.distributed.pipelining needs a linear chain of stages with
tensor boundaries, reference §3.4.2). Two ways to assign blocks to stages, as in smp:

* **auto** (``auto_partition: True``): a balanced contiguous split of the block sequence by parameter
  count (minimises the largest stage). smp's traced cost model is not reproduced, so its decisions
  differ; the layout is deterministic, so every rank computes the same split without communication.
* **manual**: ``smp.partition(i)`` contexts (modules created or registered inside the context belong to
  partition ``i``, innermost wins), ``smp.set_partition(module, i)``, and ``default_partition`` for
  annotated-free blocks with parameters. Parameter-free blocks (activations, pooling) without an
  annotation follow the preceding block, so they never break the chain. The partition ids must be
  non-decreasing along the sequence; anything else cannot be a pipeline and is rejected.
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from smlaunch.rank.smp.config import SMPValidationError

_ASSIGNED: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()
_STACK: list[int] = []


def _on_module_registered(module: nn.Module, name: str, submodule: nn.Module | None) -> None:
    if _STACK and submodule is not None and submodule not in _ASSIGNED:
        _ASSIGNED[submodule] = _STACK[-1]


def _on_tensor_registered(module: nn.Module, name: str, tensor: torch.Tensor | None) -> None:
    if _STACK and module not in _ASSIGNED:
        _ASSIGNED[module] = _STACK[-1]


@contextlib.contextmanager
def partition(index: int) -> Iterator[None]:
    """smp.partition: modules created (or attached to a parent) inside go to partition ``index``."""
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise SMPValidationError(f"smp.partition index must be a non-negative integer, got {index!r}.")
    from torch.nn.modules import module as module_mod

    handles = []
    if not _STACK:
        handles = [
            module_mod.register_module_module_registration_hook(_on_module_registered),
            module_mod.register_module_parameter_registration_hook(_on_tensor_registered),
            module_mod.register_module_buffer_registration_hook(_on_tensor_registered),
        ]
    _STACK.append(index)
    try:
        yield
    finally:
        _STACK.pop()
        for h in handles:
            h.remove()


def set_partition(module: nn.Module, index: int) -> None:
    """smp.set_partition: place ``module`` (and its unannotated descendants) on partition ``index``."""
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise SMPValidationError(f"set_partition index must be a non-negative integer, got {index!r}.")
    _ASSIGNED[module] = index


def assigned_partition(module: nn.Module) -> int | None:
    return _ASSIGNED.get(module)


def _has_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def _not_a_chain(model: nn.Module, why: str) -> SMPValidationError:
    return SMPValidationError(
        f"pipeline_parallel_degree > 1 needs a model whose forward is a linear chain of its top-level "
        f"children (an nn.Sequential, or a module whose forward only passes each child's output to the "
        f"next child); {type(model).__name__} is not: {why}. torch.distributed.pipelining cannot cut "
        "Python control flow or tensor operations between partitions; move that code inside a child module."
    )


def blocks_of(
    model: nn.Module, example: tuple[torch.Tensor, ...] | None = None
) -> list[tuple[str, nn.Module]]:
    """The block sequence of a pipelinable model, or a clear error for any other model.

    An ``nn.Sequential`` is its children. Any other module is probed with ``example`` (without
    gradients, its children in ``eval()`` mode so no statistics move): its top-level children must
    each be called once, the first with the model's input, every other with exactly the previous
    child's output, and the model must return the last child's output; the children then form the
    chain in call order. The probe runs twice, with the model itself in eval and in training mode,
    because the pipeline calls the children directly: code of the model's own ``forward`` between
    children that runs only in training (``if self.training: ...``) would otherwise be dropped.
    """
    if isinstance(model, nn.Sequential):
        return list(model.named_children())
    if example is None:
        raise _not_a_chain(model, "no example input to trace it with")
    if any(True for _ in model.parameters(recurse=False)) or any(True for _ in model.buffers(recurse=False)):
        raise _not_a_chain(model, "it holds parameters or buffers outside its children")
    order = _probe_chain(model, example, training=False)
    if _probe_chain(model, example, training=True) != order:
        raise _not_a_chain(model, "forward calls its children differently in training and in eval mode")
    children = dict(model.named_children())
    return [(n, children[n]) for n in order]


def _probe_chain(model: nn.Module, example: tuple[torch.Tensor, ...], training: bool) -> list[str]:
    """One probe of :func:`blocks_of`: the children's names in call order, or a clear error."""
    names = {id(m): n for n, m in model.named_children()}
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any], Any]] = []

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        calls.append((names[id(module)], args, kwargs, output))

    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in model.children()]
    modes = {m: m.training for m in model.modules()}
    model.eval()
    model.training = training  # the model's own flag only: its children stay in eval mode
    try:
        with torch.no_grad():
            result = model(*example)
    finally:
        for h in handles:
            h.remove()
        for m, was_training in modes.items():
            m.training = was_training
    mode = "training" if training else "eval"
    if not calls:
        raise _not_a_chain(model, f"forward calls none of its children (in {mode} mode)")
    order = [c[0] for c in calls]
    if len(set(order)) != len(order):
        raise _not_a_chain(model, f"children are called more than once ({order})")
    first_args = calls[0][1]
    if len(first_args) != len(example) or any(a is not e for a, e in zip(first_args, example, strict=False)):
        raise _not_a_chain(
            model, f"child {order[0]!r} does not receive the model's input unchanged (in {mode} mode)"
        )
    for (prev, _, _, out), (name, args, kwargs, _) in itertools.pairwise(calls):
        passed = args[0] if len(args) == 1 else args
        if kwargs or passed is not out:
            raise _not_a_chain(
                model, f"child {name!r} does not receive exactly the output of {prev!r} (in {mode} mode)"
            )
    if result is not calls[-1][3]:
        raise _not_a_chain(
            model, f"forward does not return the output of its last child {order[-1]!r} (in {mode} mode)"
        )
    unused = [n for n, m in model.named_children() if n not in order and any(True for _ in m.parameters())]
    if unused:
        raise _not_a_chain(model, f"children {unused} with parameters are never called (in {mode} mode)")
    return order


def manual_partition(
    blocks: Sequence[tuple[str, nn.Module]], num_partitions: int, default_partition: int
) -> list[int]:
    """Partition id per block from smp.partition / set_partition / default_partition."""
    ids: list[int | None] = []
    for name, block in blocks:
        own = _ASSIGNED.get(block)
        if own is None:
            inner = {_ASSIGNED[m] for m in block.modules() if m in _ASSIGNED}
            if len(inner) > 1:
                raise SMPValidationError(
                    f"Block {name!r} holds modules assigned to partitions {sorted(inner)}; a pipeline stage "
                    "boundary can only fall between top-level blocks of the nn.Sequential. Assign the whole "
                    "block to one partition or split it into several blocks."
                )
            own = inner.pop() if inner else (default_partition if _has_params(block) else None)
        ids.append(own)
    # Parameter-free unannotated blocks follow their predecessor (or successor for a leading run).
    for i, v in enumerate(ids):
        if v is None and i > 0:
            ids[i] = ids[i - 1]
    first = next((v for v in ids if v is not None), default_partition)
    resolved = [first if v is None else v for v in ids]
    for (name, _), pid in zip(blocks, resolved, strict=True):
        if pid >= num_partitions:
            raise SMPValidationError(
                f"Block {name!r} is assigned to partition {pid}, but there are only "
                f"{num_partitions} partitions."
            )
    for i in range(1, len(resolved)):
        if resolved[i] < resolved[i - 1]:
            raise SMPValidationError(
                f"Non-monotone partition layout: block {blocks[i][0]!r} (partition {resolved[i]}) runs "
                f"after block {blocks[i - 1][0]!r} (partition {resolved[i - 1]}). smp could send control "
                "back to an earlier partition; a torch pipeline cannot. Partition ids must be "
                "non-decreasing in execution order."
            )
    missing = sorted(set(range(num_partitions)) - set(resolved))
    if missing:
        raise SMPValidationError(
            f"Partitions {missing} hold no module; every partition needs at least one block."
        )
    return resolved


def balanced_split(weights: Sequence[int], num_parts: int) -> list[int]:
    """Contiguous split minimising the heaviest part; returns the part id of every item.

    Exact dynamic programme (O(n^2 * parts)); ties prefer earlier cuts, so the result is deterministic.
    """
    n = len(weights)
    if n < num_parts:
        raise SMPValidationError(
            f"The model has {n} top-level blocks but {num_parts} pipeline stages were requested; use at most "
            f"{n} partitions or split the model into more nn.Sequential children."
        )
    prefix = [0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(num_parts + 1)]
    cut = [[0] * (n + 1) for _ in range(num_parts + 1)]
    best[0][0] = 0
    for k in range(1, num_parts + 1):
        for j in range(k, n - (num_parts - k) + 1):
            for i in range(k - 1, j):
                cost = max(best[k - 1][i], prefix[j] - prefix[i])
                if cost < best[k][j]:
                    best[k][j] = cost
                    cut[k][j] = i
    ids = [0] * n
    j = n
    for k in range(num_parts, 0, -1):
        i = cut[k][j]
        for t in range(i, j):
            ids[t] = k - 1
        j = i
    return ids


def auto_partition(blocks: Sequence[tuple[str, nn.Module]], num_parts: int) -> list[int]:
    """Balanced contiguous split by parameter count (parameter-free blocks weigh 1)."""
    weights = [max(1, sum(p.numel() for p in b.parameters())) for _, b in blocks]
    return balanced_split(weights, num_parts)
