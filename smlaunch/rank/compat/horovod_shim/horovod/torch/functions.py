"""``horovod.torch.functions``: broadcasting a model, an optimizer's state and Python objects."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from horovod.torch import mpi_ops


def broadcast_parameters(params: Any, root_rank: int) -> None:
    """Overwrite every tensor of ``params`` with ``root_rank``'s, in place.

    ``params``: a ``state_dict()`` (parameters and buffers), ``model.named_parameters()`` or a list
    of ``(name, tensor)`` pairs. Tensors are sent in name order, several per message (grouped by
    device and dtype), so every rank must pass the same names."""
    if isinstance(params, Mapping):
        items = sorted(params.items())
    elif isinstance(params, Iterable) and not isinstance(params, (str, bytes, torch.Tensor)):
        items = list(params)
        if not all(isinstance(item, tuple) and len(item) == 2 for item in items):
            raise ValueError(
                "broadcast_parameters: pass model.state_dict() or model.named_parameters() "
                "(a list of (name, tensor) pairs)"
            )
    else:
        raise ValueError(
            f"broadcast_parameters: invalid params of type {type(params).__name__}; pass "
            "model.state_dict() or model.named_parameters()"
        )
    mpi_ops._check_root(root_rank)
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for _, tensor in items:
        if isinstance(tensor, torch.Tensor):
            groups.setdefault((tensor.device, tensor.dtype), []).append(tensor.data)
    for tensors in groups.values():
        flat = torch.cat([t.reshape(-1) for t in tensors])
        mpi_ops.broadcast_(flat, root_rank)
        offset = 0
        with torch.no_grad():
            for tensor in tensors:
                tensor.copy_(flat[offset : offset + tensor.numel()].view_as(tensor))
                offset += tensor.numel()


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int, model: Any = None) -> None:
    """Make every rank's optimizer state (step counts, moments, learning rates and the other
    ``param_groups`` options) equal ``root_rank``'s."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    mpi_ops._check_root(root_rank)
    state = optimizer.state_dict() if mpi_ops.rank() == root_rank else None
    state = broadcast_object(state, root_rank)
    if mpi_ops.rank() != root_rank:
        optimizer.load_state_dict(state)


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None, process_set: Any = None) -> Any:
    """``root_rank``'s ``obj`` (any picklable object), on every rank."""
    mpi_ops._check_root(root_rank)
    holder = [obj if mpi_ops.rank() == root_rank else None]
    dist.broadcast_object_list(holder, src=root_rank, group=mpi_ops._state.cpu_group)
    return holder[0]


def allgather_object(obj: Any, name: str | None = None, process_set: Any = None) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order."""
    gathered: list[Any] = [None] * mpi_ops.size()
    dist.all_gather_object(gathered, obj, group=mpi_ops._state.cpu_group)
    return gathered
