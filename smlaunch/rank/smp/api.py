"""The smp v1 public API in one namespace (``smdistributed.modelparallel.torch`` re-exports it).

Ranks and sizes come from the mesh coordinates (:mod:`smlaunch.rank.smp.layout`); the communication
helpers carry arbitrary picklable objects with smp's one-sided semantics (``broadcast`` is received with
``recv_from``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from smlaunch.rank.smp.checkpoint import (
    load,
    merge_partial_checkpoint,
    resume_from_checkpoint,
    save,
    save_checkpoint,
)
from smlaunch.rank.smp.config import SMPUnsupportedAPIError, SMPUnsupportedError, SMPValidationError
from smlaunch.rank.smp.layout import CommGroup, RankType
from smlaunch.rank.smp.microbatch import StepOutput, TensorSplitError
from smlaunch.rank.smp.model import DistributedModel
from smlaunch.rank.smp.optimizer import DistributedOptimizer
from smlaunch.rank.smp.partition import partition, set_partition
from smlaunch.rank.smp.state import STATE, init
from smlaunch.rank.smp.step import StepFunction, step

WORLD = CommGroup.WORLD
PP_GROUP = CommGroup.PP_GROUP
TP_GROUP = CommGroup.TP_GROUP
RDP_GROUP = CommGroup.RDP_GROUP
DP_GROUP = CommGroup.DP_GROUP
MP_GROUP = CommGroup.MP_GROUP


def is_initialized() -> bool:
    return STATE.initialized


def is_tracing() -> bool:
    return False


def num_microbatches() -> int:
    return int(STATE.require().config.values["microbatches"])  # type: ignore[union-attr]


def rank() -> int:
    return STATE.require().rank


def size() -> int:
    return STATE.require().world_size


def local_rank() -> int:
    return STATE.require().local_rank


def local_size() -> int:
    return STATE.require().local_size


def pp_rank() -> int:
    return STATE.group_rank("P")


def pp_size() -> int:
    return STATE.group_size("P")


def tp_rank() -> int:
    return STATE.group_rank("T")


def tp_size() -> int:
    return STATE.group_size("T")


def rdp_rank() -> int:
    return STATE.group_rank("D")


def rdp_size() -> int:
    return STATE.group_size("D")


def dp_rank() -> int:
    return STATE.group_rank("DT")


def dp_size() -> int:
    return STATE.group_size("DT")


def mp_rank() -> int:
    return STATE.group_rank("PT")


def mp_size() -> int:
    return STATE.group_size("PT")


def _group_list(letters: str, **fixed: int | None) -> list[int]:
    st = STATE.require()
    coords = {k: v for k, v in fixed.items() if v is not None}
    return st.layout.group_of(st.rank, letters, **coords)  # type: ignore[union-attr]


def get_pp_group(rdp_rank: int | None = None, tp_rank: int | None = None) -> list[int]:
    return _group_list("P", D=rdp_rank, T=tp_rank)


def get_tp_group(rdp_rank: int | None = None, pp_rank: int | None = None) -> list[int]:
    return _group_list("T", D=rdp_rank, P=pp_rank)


def get_rdp_group(pp_rank: int | None = None, tp_rank: int | None = None) -> list[int]:
    return _group_list("D", P=pp_rank, T=tp_rank)


def get_dp_group(pp_rank: int | None = None) -> list[int]:
    return _group_list("DT", P=pp_rank)


def get_mp_group(rdp_rank: int | None = None) -> list[int]:
    return _group_list("PT", D=rdp_rank)


def get_pp_process_group() -> Any:
    return STATE.process_group("P")


def get_tp_process_group() -> Any:
    return STATE.process_group("T")


def get_rdp_process_group() -> Any:
    return STATE.process_group("D")


def get_dp_process_group() -> Any:
    return STATE.process_group("DT")


def get_mp_process_group() -> Any:
    return STATE.process_group("PT")


def get_world_process_group() -> Any:
    return STATE.process_group("DPT")


# -- communication ----------------------------------------------------------------------------


def barrier(group: CommGroup = CommGroup.WORLD) -> None:
    dist.barrier(group=STATE.process_group(group.value))


def pp_barrier() -> None:
    barrier(PP_GROUP)


def tp_barrier() -> None:
    barrier(TP_GROUP)


def rdp_barrier() -> None:
    barrier(RDP_GROUP)


def dp_barrier() -> None:
    barrier(DP_GROUP)


def mp_barrier() -> None:
    barrier(MP_GROUP)


def broadcast(obj: Any, group: CommGroup = CommGroup.WORLD) -> None:
    """One-sided: every other member of ``group`` receives ``obj`` with ``recv_from(my_rank, ...)``."""
    st = STATE.require()
    for r in st.group_ranks(group.value):
        if r != st.rank:
            dist.send_object_list([obj], dst=r)


def send(obj: Any, dest_rank: int, rank_type: RankType) -> None:
    dist.send_object_list([obj], dst=STATE.global_rank(dest_rank, rank_type.value))


def recv_from(src_rank: int, rank_type: RankType) -> Any:
    box: list[Any] = [None]
    dist.recv_object_list(box, src=STATE.global_rank(src_rank, rank_type.value))
    return box[0]


def allgather(obj: Any, group: CommGroup = CommGroup.WORLD) -> list[Any]:
    out: list[Any] = [None] * STATE.group_size(group.value)
    dist.all_gather_object(out, obj, group=STATE.process_group(group.value))
    return out


def gather(obj: Any, group: CommGroup = CommGroup.WORLD, rank: int = 0) -> list[Any] | None:
    st = STATE.require()
    dst = st.global_rank(rank, group.value)
    out: list[Any] | None = [None] * st.group_size(group.value) if st.rank == dst else None
    dist.gather_object(obj, out, dst=dst, group=st.process_group(group.value))
    return out


# -- utilities ----------------------------------------------------------------------------------


def _checkpointed(forward: Callable[..., Any], preserve_rng_state: bool) -> Callable[..., Any]:
    from torch.utils.checkpoint import checkpoint

    @functools.wraps(forward)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        return checkpoint(
            forward, *args, use_reentrant=False, preserve_rng_state=preserve_rng_state, **kwargs
        )

    return wrapper


def _checkpoint_groups(children: list[nn.Module], strategy: str) -> list[list[nn.Module]]:
    """smp's activation-checkpointing strategies over a sequence of modules."""
    if strategy == "each":
        return [[c] for c in children]
    if strategy == "contiguous":
        return [children]
    if strategy.startswith("group_") and strategy[6:].isdigit() and int(strategy[6:]) > 0:
        n = int(strategy[6:])
        return [children[i : i + n] for i in range(0, len(children), n)]
    raise SMPValidationError(f"strategy={strategy!r}: must be 'each', 'contiguous' or 'group_N' with N >= 1.")


def set_activation_checkpointing(
    module: nn.Module,
    preserve_rng_state: bool = True,
    pack_args_as_tuple: bool = False,
    strategy: str = "each",
) -> None:
    """Recompute ``module``'s activations in backward (torch.utils.checkpoint, non-reentrant).

    For an ``nn.Sequential``: ``each`` checkpoints every child, ``contiguous`` the whole sequence,
    ``group_N`` runs of N children; other modules are checkpointed as a whole. On the top-level model
    that the pipeline splits, only ``each`` applies (stages call the blocks, not the model's forward);
    apply the others to a block.
    """
    if isinstance(module, nn.Sequential):
        children = list(module)
        groups = _checkpoint_groups(children, strategy)
        if strategy == "each":
            for c in children:
                c.forward = _checkpointed(c.forward, preserve_rng_state)  # type: ignore[method-assign]
            return
        if strategy == "contiguous":
            module.forward = _checkpointed(module.forward, preserve_rng_state)  # type: ignore[method-assign]
            return
        runners = [_checkpointed(nn.Sequential(*g).forward, preserve_rng_state) for g in groups]

        def grouped_forward(x: Any) -> Any:
            for run in runners:
                x = run(x)
            return x

        module.forward = grouped_forward  # type: ignore[method-assign]
        return
    module.forward = _checkpointed(module.forward, preserve_rng_state)  # type: ignore[method-assign]


def checkpoint(module: nn.Module, *args: Any, preserve_rng_state: bool = True) -> Any:
    """``smp.checkpoint(module, *args)``: ``module(*args)`` with its activations recomputed in backward."""
    return _checkpointed(module, preserve_rng_state)(*args)


def checkpoint_sequential(
    sequential_module: nn.Sequential,
    input: Any,
    strategy: str = "each",
    preserve_rng_state: bool = True,
    pack_args_as_tuple: bool = False,
) -> Any:
    """``smp.checkpoint_sequential``: run an ``nn.Sequential`` on ``input``, checkpointing its
    children by ``strategy`` (``each``, ``contiguous``, ``group_N``)."""
    x = input
    for group in _checkpoint_groups(list(sequential_module), strategy):
        x = _checkpointed(nn.Sequential(*group), preserve_rng_state)(x)
    return x


@contextlib.contextmanager
def tensor_parallelism(enabled: bool = True, **kwargs: Any) -> Iterator[None]:
    if enabled:
        raise SMPUnsupportedError("smp.tensor_parallelism", enabled, "use tensor_parallelism(enabled=False)")
    yield


@contextlib.contextmanager
def delay_param_initialization(enabled: bool = True) -> Iterator[None]:
    """Accepted; parameters are initialised normally (no meta-device deferral)."""
    yield


@contextlib.contextmanager
def model_creation(
    tensor_parallelism: bool = False, dtype: torch.dtype | None = None, **tp_config: Any
) -> Iterator[None]:
    if tensor_parallelism:
        raise SMPUnsupportedError(
            "model_creation(tensor_parallelism=True)",
            True,
            "tensor parallelism is not supported; pipeline only",
        )
    old = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def tp_register(
    dist_module: Any, init_hook: Any = None, forward_hook: Any = None, return_hook: Any = None
) -> Any:
    """Unsupported (tensor parallelism): raises naming the alternative."""
    raise SMPUnsupportedAPIError("smp.tp_register", _NO_TP)


def tp_register_with_module(
    module_cls: Any,
    dist_module: Any,
    init_hook: Any = None,
    forward_hook: Any = None,
    return_hook: Any = None,
) -> None:
    """Unsupported (tensor parallelism): raises naming the alternative."""
    raise SMPUnsupportedAPIError("smp.tp_register_with_module", _NO_TP)


def set_tensor_parallelism(module: nn.Module, enabled: bool = True, **tp_config: Any) -> None:
    """Accepted with ``enabled=False``; tensor parallelism itself is unsupported."""
    if enabled:
        raise SMPUnsupportedAPIError("smp.set_tensor_parallelism(enabled=True)", _NO_TP)


_NO_TP = "pipeline and data parallelism only (tensor_parallel_degree=1): drop the tensor-parallel call"

state = STATE
"""``smp.state``: what ``smp.init`` established (``state.model``, ``state.optimizer``, ``state.cfg``)."""

_ALTERNATIVES = {
    "optimizers": "torch.optim (e.g. AdamW) instead of smp.optimizers.FusedLamb/FusedNovoGrad",
    "nn.huggingface": "the Hugging Face model itself (no tensor-parallel translation)",
    "shard_optimizer_state": "torch.distributed.optim.ZeroRedundancyOptimizer (smp.get_dp_process_group())",
}


def unknown_name(module: str, name: str) -> AttributeError:
    """The error for a name smlaunch's smp does not have: says what to use where smp v1 had it."""
    hint = _ALTERNATIVES.get(name)
    if hint is not None:
        return AttributeError(str(SMPUnsupportedAPIError(f"smp.{name}", hint)))
    return AttributeError(
        f"module {module!r} has no attribute {name!r} (smlaunch's smp v1 on torch.distributed.pipelining; "
        "its API and fidelity: smlaunch/rank/smp/README.md)"
    )


__all__ = [
    "DP_GROUP",
    "MP_GROUP",
    "PP_GROUP",
    "RDP_GROUP",
    "TP_GROUP",
    "WORLD",
    "CommGroup",
    "DistributedModel",
    "DistributedOptimizer",
    "RankType",
    "SMPUnsupportedAPIError",
    "SMPUnsupportedError",
    "SMPValidationError",
    "StepFunction",
    "StepOutput",
    "TensorSplitError",
    "allgather",
    "barrier",
    "broadcast",
    "checkpoint",
    "checkpoint_sequential",
    "delay_param_initialization",
    "dp_barrier",
    "dp_rank",
    "dp_size",
    "gather",
    "get_dp_group",
    "get_dp_process_group",
    "get_mp_group",
    "get_mp_process_group",
    "get_pp_group",
    "get_pp_process_group",
    "get_rdp_group",
    "get_rdp_process_group",
    "get_tp_group",
    "get_tp_process_group",
    "get_world_process_group",
    "init",
    "is_initialized",
    "is_tracing",
    "load",
    "local_rank",
    "local_size",
    "merge_partial_checkpoint",
    "model_creation",
    "mp_barrier",
    "mp_rank",
    "mp_size",
    "num_microbatches",
    "partition",
    "pp_barrier",
    "pp_rank",
    "pp_size",
    "rank",
    "rdp_barrier",
    "rdp_rank",
    "rdp_size",
    "recv_from",
    "resume_from_checkpoint",
    "save",
    "save_checkpoint",
    "send",
    "set_activation_checkpointing",
    "set_partition",
    "set_tensor_parallelism",
    "size",
    "state",
    "step",
    "tensor_parallelism",
    "tp_barrier",
    "tp_rank",
    "tp_register",
    "tp_register_with_module",
    "tp_size",
]
