"""``smdistributed.dataparallel.torch.distributed`` on ``torch.distributed``.

The functions SageMaker's smddp scripts call, with smddp's semantics:

- :func:`init_process_group` takes no required arguments: rank, world size and master address come
  from the environment the launcher sets (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``),
  and the backend is ``"smddp"`` (NCCL on GPU, gloo on CPU; see ``torch_smddp``);
- :func:`get_local_rank` / :func:`get_local_size` are this host's rank and rank count
  (``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE``), which torch.distributed does not provide;
- every other name (``all_reduce``, ``broadcast``, ``barrier``, ``ReduceOp``, ``new_group``, ...) is
  torch.distributed's own, so a script gets the same numbers as with plain DDP.
"""

from __future__ import annotations

import os
from typing import Any

import torch.distributed as _dist
from torch.distributed import (
    Backend,
    ReduceOp,
    all_gather,
    all_gather_object,
    all_reduce,
    all_to_all_single,
    barrier,
    broadcast,
    broadcast_object_list,
    destroy_process_group,
    gather,
    get_backend,
    is_initialized,
    new_group,
    recv,
    reduce,
    reduce_scatter,
    scatter,
    send,
)

__all__ = [
    "Backend",
    "ReduceOp",
    "all_gather",
    "all_gather_object",
    "all_reduce",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "destroy_process_group",
    "gather",
    "get_backend",
    "get_local_rank",
    "get_local_size",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_available",
    "is_initialized",
    "new_group",
    "recv",
    "reduce",
    "reduce_scatter",
    "scatter",
    "send",
]


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return int(value)
    return None


def is_available() -> bool:
    """True when torch.distributed is built in (smddp: the library loaded)."""
    return _dist.is_available()


def init_process_group(backend: str | None = None, **kwargs: Any) -> None:
    """Join the job's process group (smddp: ``dist.init_process_group()``, no arguments needed).

    Idempotent, as smddp's is: a second call in the same process does nothing.
    """
    if _dist.is_initialized():
        return
    from smdistributed.dataparallel.torch import torch_smddp

    kwargs.setdefault("init_method", "env://")
    _dist.init_process_group(backend=backend or torch_smddp.BACKEND_NAME, **kwargs)


def get_rank(group: Any = None) -> int:
    """Global rank of this process (in ``group`` when given)."""
    return _dist.get_rank(group) if group is not None else _dist.get_rank()


def get_world_size(group: Any = None) -> int:
    """Number of ranks in the job (in ``group`` when given)."""
    return _dist.get_world_size(group) if group is not None else _dist.get_world_size()


def get_local_rank() -> int:
    """Rank of this process among the ranks of its host."""
    value = _env_int("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")
    if value is None:
        raise RuntimeError(
            "smdistributed.dataparallel: LOCAL_RANK is not set; run the script under a distributed "
            "launcher (distribution={'smdistributed': {'dataparallel': {'enabled': True}}})"
        )
    return value


def get_local_size() -> int:
    """Number of ranks on this host."""
    value = _env_int("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")
    if value is None:
        raise RuntimeError(
            "smdistributed.dataparallel: LOCAL_WORLD_SIZE is not set; run the script under a "
            "distributed launcher"
        )
    return value


def __getattr__(name: str) -> Any:
    """Anything else smddp re-exports from torch.distributed resolves to torch's own."""
    try:
        return getattr(_dist, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
