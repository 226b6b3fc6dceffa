"""``horovod.torch.mpi_ops`` on ``torch.distributed``: initialization, topology and collectives.

Topology: ``init()`` reads the MPI launcher's variables (``OMPI_COMM_WORLD_RANK`` / ``_SIZE``; the
per-host rank and count from ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE`` where the launcher sets them, as
smlaunch's MPI launcher does for each emulated host, else ``OMPI_COMM_WORLD_LOCAL_RANK`` /
``_LOCAL_SIZE``), or torchrun's (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``);
the rendezvous is ``MASTER_ADDR`` / ``MASTER_PORT``. Without any launcher it is a world of one, as
with Horovod. A process group the script already created is reused.

Collectives keep Horovod's semantics: ``allreduce`` averages by default (``op=Sum``, ``Min``,
``Max``, ``Product``; ``Adasum`` is refused), takes ``prescale_factor`` / ``postscale_factor`` and
a ``compression``; ``allgather`` concatenates along dimension 0 even when the ranks' first
dimensions differ; ``alltoall`` splits along dimension 0. The backend is NCCL when CUDA is
available, else gloo; CPU tensors in an NCCL job go through a gloo group, as Horovod moves them
through its CPU path. ``*_async`` variants return a handle for :func:`synchronize` / :func:`poll`.

One module, though longer than most: it is Horovod's own ``horovod/torch/mpi_ops.py``, whose import
path and surface scripts rely on (``from horovod.torch.mpi_ops import allreduce_async_``); every
collective shares the topology and group choice above.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from horovod.torch.compression import Compression, NoneCompressor

Average = "Average"
Sum = "Sum"
Adasum = "Adasum"
Min = "Min"
Max = "Max"
Product = "Product"

_REDUCE_OPS = {
    Average: dist.ReduceOp.SUM,
    Sum: dist.ReduceOp.SUM,
    Min: dist.ReduceOp.MIN,
    Max: dist.ReduceOp.MAX,
    Product: dist.ReduceOp.PRODUCT,
}


class HorovodInternalError(RuntimeError):
    """Horovod's error type for failed collectives (scripts catch it in elastic loops)."""


@dataclass
class _State:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    cross_rank: int = 0
    cross_size: int = 1
    backend: str = "gloo"
    owns_group: bool = False
    cpu_group: Any = None
    joins: int = 0
    initialized: bool = False


_state = _State()


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return int(value)
    return None


def _topology() -> tuple[int, int, int, int]:
    """(rank, size, local_rank, local_size) from the launcher's variables."""
    if os.environ.get("OMPI_COMM_WORLD_RANK", "").strip():
        rank = _env_int("OMPI_COMM_WORLD_RANK") or 0
        size = _env_int("OMPI_COMM_WORLD_SIZE") or 1
        local_rank = _env_int("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")
        local_size = _env_int("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")
    else:
        rank = _env_int("RANK") or 0
        size = _env_int("WORLD_SIZE") or 1
        local_rank = _env_int("LOCAL_RANK")
        local_size = _env_int("LOCAL_WORLD_SIZE")
    if local_size is None:
        local_size = size
    if local_rank is None:
        local_rank = rank % local_size
    return rank, size, local_rank, local_size


def init(comm: Any = None, process_sets: Any = None) -> None:
    """Join the job's process group (idempotent). ``comm`` (an mpi4py communicator or rank list)
    and ``process_sets`` are accepted for the global set only."""
    if comm is not None and comm != []:
        if not (hasattr(comm, "Get_size") and comm.Get_size() == _topology()[1]):
            raise ValueError(
                "horovod.torch (smlaunch): init(comm=...) supports the whole job only; "
                "call hvd.init() without comm"
            )
    if process_sets not in (None, [], "dynamic"):
        raise ValueError("horovod.torch (smlaunch): process sets are not supported; call hvd.init()")
    if os.environ.get("HOROVOD_TIMELINE"):
        _refuse_timeline()
    if _state.initialized:
        return
    rank, size, local_rank, local_size = _topology()
    backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if dist.is_initialized():
        backend = str(dist.get_backend())
        rank, size = dist.get_rank(), dist.get_world_size()
        _state.owns_group = False
    elif size == 1:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        _state.owns_group = True
    else:
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(name):
                raise RuntimeError(
                    f"horovod.torch (smlaunch): {name} is not set, so the {size} ranks cannot meet; "
                    "launch with distribution={'mpi': {'enabled': True, 'processes_per_host': N}} "
                    "(smlaunch sets it) or with torchrun"
                )
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=size)
        _state.owns_group = True
    if local_size < 1 or size % local_size:
        local_size, local_rank = size, rank
    _state.rank, _state.size = rank, size
    _state.local_rank, _state.local_size = local_rank, local_size
    _state.cross_size = size // local_size
    _state.cross_rank = rank // local_size
    _state.backend = backend
    _state.cpu_group = dist.new_group(backend="gloo") if backend == "nccl" else None
    _state.joins = 0
    _state.initialized = True


def shutdown() -> None:
    """Leave the process group (when ``init`` created it)."""
    if not _state.initialized:
        return
    if _state.owns_group and dist.is_initialized():
        dist.destroy_process_group()
    _state.initialized = False
    _state.cpu_group = None


def is_initialized() -> bool:
    """Whether :func:`init` has run (and :func:`shutdown` has not)."""
    return _state.initialized


def _require_init() -> _State:
    if not _state.initialized:
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    return _state


def size() -> int:
    """The number of ranks in the job."""
    return _require_init().size


def rank() -> int:
    """This process's rank in the job."""
    return _require_init().rank


def local_size() -> int:
    """The number of ranks on this host."""
    return _require_init().local_size


def local_rank() -> int:
    """This process's rank on its host (the GPU it should use)."""
    return _require_init().local_rank


def cross_size() -> int:
    """The number of hosts (ranks with the same local rank)."""
    return _require_init().cross_size


def cross_rank() -> int:
    """This host's index among the hosts."""
    return _require_init().cross_rank


def is_homogeneous() -> bool:
    """Every host runs the same number of ranks (always, under smlaunch's launchers)."""
    state = _require_init()
    return state.size % state.local_size == 0


def mpi_threads_supported() -> bool:
    """False: no MPI library is linked; collectives go through torch.distributed."""
    _require_init()
    return False


def mpi_enabled() -> bool:
    """False: collectives go through torch.distributed, not MPI."""
    return False


def mpi_built() -> bool:
    """False: this Horovod is not built against MPI."""
    return False


def gloo_enabled() -> bool:
    """True when the job's collectives use gloo (CPU jobs; CPU tensors of GPU jobs too)."""
    return True


def gloo_built() -> bool:
    """True: gloo ships with torch.distributed."""
    return dist.is_gloo_available()


def nccl_built() -> int:
    """NCCL's version as Horovod reports it (e.g. 21803), or 0 when torch has no NCCL."""
    if not (torch.cuda.is_available() and dist.is_nccl_available()):
        return 0
    major, minor, patch = torch.cuda.nccl.version()
    return major * 10000 + minor * 100 + patch


def cuda_built() -> bool:
    """Whether torch was built with CUDA."""
    return torch.backends.cuda.is_built()


def rocm_built() -> bool:
    """Whether torch was built with ROCm."""
    return torch.version.hip is not None


def ddl_built() -> bool:
    """False: IBM DDL is not supported."""
    return False


def ccl_built() -> bool:
    """False: oneCCL is not supported."""
    return False


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Refused: the Horovod timeline needs the real Horovod."""
    _refuse_timeline()


def stop_timeline() -> None:
    """Refused: the Horovod timeline needs the real Horovod."""
    _refuse_timeline()


def _refuse_timeline() -> None:
    raise NotImplementedError(
        "horovod.torch (smlaunch): the Horovod timeline (HOROVOD_TIMELINE, hvd.start_timeline) needs "
        "the real Horovod; unset HOROVOD_TIMELINE and profile with torch.profiler instead"
    )


# --- handles ------------------------------------------------------------------------------------


@dataclass
class _Handle:
    """An outstanding collective: the torch work (None when done synchronously) and what turns its
    buffer into the result."""

    work: Any
    finish: Callable[[], Any]
    result: Any = None
    done: bool = False

    def wait(self) -> Any:
        if not self.done:
            if self.work is not None:
                self.work.wait()
            self.result = self.finish()
            self.done = True
        return self.result


def synchronize(handle: _Handle) -> Any:
    """Wait for an ``*_async`` operation; its result."""
    if not isinstance(handle, _Handle):
        raise ValueError(f"synchronize(): {handle!r} is not a handle from an *_async operation")
    return handle.wait()


def poll(handle: _Handle) -> bool:
    """Whether an ``*_async`` operation has finished."""
    return handle.done or handle.work is None or bool(handle.work.is_completed())


def _group(tensor: torch.Tensor) -> Any:
    state = _require_init()
    if state.cpu_group is not None and tensor.device.type == "cpu":
        return state.cpu_group
    return None


def _check_op(op: str | None, average: bool | None) -> str:
    if op is not None and average is not None:
        raise ValueError("horovod.torch: pass op= or average=, not both")
    if op is None:
        op = Sum if average is False else Average
    if op == Adasum:
        raise NotImplementedError(
            "horovod.torch (smlaunch): op=hvd.Adasum needs the real Horovod; use op=hvd.Average "
            "(the default) or hvd.Sum"
        )
    if op not in _REDUCE_OPS:
        raise ValueError(
            f"horovod.torch: unknown op {op!r}; use hvd.Average, hvd.Sum, hvd.Min, hvd.Max or hvd.Product"
        )
    return op


def _scale(tensor: torch.Tensor, factor: float) -> None:
    if factor == 1.0:
        return
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.mul_(factor)
    else:
        tensor.copy_(torch.floor(tensor.double() * factor).to(tensor.dtype))


def _allreduce_start(
    tensor: torch.Tensor,
    op: str,
    prescale_factor: float,
    postscale_factor: float,
    compression: Any,
    out: torch.Tensor | None,
) -> _Handle:
    """Reduce ``compression(tensor)`` into a buffer; the handle's result is written to ``out``
    (in-place variants) or returned as a new tensor."""
    state = _require_init()
    compressed, ctx = compression.compress(tensor)
    buffer = compressed.detach().clone(memory_format=torch.contiguous_format)
    _scale(buffer, prescale_factor)
    work = dist.all_reduce(buffer, op=_REDUCE_OPS[op], group=_group(buffer), async_op=True)
    post = postscale_factor / state.size if op == Average else postscale_factor

    def finish() -> torch.Tensor:
        _scale(buffer, post)
        result = compression.decompress(buffer, ctx)
        if out is not None:
            with torch.no_grad():
                out.copy_(result)
            return out
        return result

    return _Handle(work, finish)


def allreduce_async(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: str | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = None,
) -> _Handle:
    """Start :func:`allreduce`; :func:`synchronize` returns the reduced tensor."""
    return _allreduce_start(
        tensor, _check_op(op, average), prescale_factor, postscale_factor, NoneCompressor, None
    )


def allreduce_async_(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: str | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = None,
) -> _Handle:
    """Start :func:`allreduce_`; :func:`synchronize` returns ``tensor``, reduced in place."""
    return _allreduce_start(
        tensor, _check_op(op, average), prescale_factor, postscale_factor, NoneCompressor, tensor
    )


def allreduce(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    compression: Any = Compression.none,
    op: str | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = None,
) -> torch.Tensor:
    """The tensor reduced over all ranks (averaged unless ``op`` says otherwise), as a new tensor.

    Differentiable as Horovod's: the gradient of an average is the average of the gradients."""
    op = _check_op(op, average)
    if tensor.requires_grad and torch.is_grad_enabled():
        return _AllreduceFunction.apply(tensor, op, prescale_factor, postscale_factor)
    return _allreduce_start(tensor, op, prescale_factor, postscale_factor, compression, None).wait()


def allreduce_(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    op: str | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = None,
) -> torch.Tensor:
    """Reduce ``tensor`` over all ranks in place (averaged unless ``op`` says otherwise)."""
    return allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor).wait()


class _AllreduceFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, op: str, prescale: float, postscale: float) -> torch.Tensor:
        ctx.args = (op, prescale, postscale)
        return _allreduce_start(tensor, op, prescale, postscale, NoneCompressor, None).wait()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        op, prescale, postscale = ctx.args
        reduced = _allreduce_start(grad.contiguous(), op, prescale, postscale, NoneCompressor, None).wait()
        return reduced, None, None, None


def allgather_async(tensor: torch.Tensor, name: str | None = None, process_set: Any = None) -> _Handle:
    """Start :func:`allgather`."""
    state = _require_init()
    group = _group(tensor)
    tensor = tensor.detach().contiguous()
    if tensor.dim() == 0:
        tensor = tensor.reshape(1)
    first = torch.tensor([tensor.shape[0]], dtype=torch.int64, device=tensor.device)
    firsts = [torch.empty_like(first) for _ in range(state.size)]
    dist.all_gather(firsts, first, group=group)
    lengths = [int(f.item()) for f in firsts]
    longest = max(lengths)
    padded = tensor
    if tensor.shape[0] < longest:
        pad = tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))
        padded = torch.cat([tensor, pad])
    parts = [torch.empty_like(padded) for _ in range(state.size)]
    work = dist.all_gather(parts, padded, group=group, async_op=True)
    return _Handle(work, lambda: torch.cat([p[:n] for p, n in zip(parts, lengths, strict=True)]))


def allgather(tensor: torch.Tensor, name: str | None = None, process_set: Any = None) -> torch.Tensor:
    """Every rank's tensor concatenated along dimension 0 in rank order (first dimensions may
    differ between ranks; the other dimensions must match)."""
    return allgather_async(tensor, name).wait()


def broadcast_async_(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: Any = None
) -> _Handle:
    """Start :func:`broadcast_`."""
    _check_root(root_rank)
    target = tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor
    buffer = target if target.is_contiguous() else target.contiguous()
    work = dist.broadcast(buffer, root_rank, group=_group(buffer), async_op=True)

    def finish() -> torch.Tensor:
        if buffer is not target:
            with torch.no_grad():
                target.copy_(buffer)
        return tensor

    return _Handle(work, finish)


def broadcast_async(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: Any = None
) -> _Handle:
    """Start :func:`broadcast`."""
    return broadcast_async_(tensor.detach().clone(), root_rank, name)


def broadcast_(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: Any = None
) -> torch.Tensor:
    """Overwrite ``tensor`` with ``root_rank``'s, in place."""
    return broadcast_async_(tensor, root_rank, name).wait()


def broadcast(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: Any = None
) -> torch.Tensor:
    """``root_rank``'s tensor, as a new tensor."""
    return broadcast_async(tensor, root_rank, name).wait()


def alltoall_async(
    tensor: torch.Tensor, splits: Any = None, name: str | None = None, process_set: Any = None
) -> _Handle:
    """Start :func:`alltoall`."""
    state = _require_init()
    group = _group(tensor)
    tensor = tensor.detach().contiguous()
    if splits is None:
        if tensor.shape[0] % state.size:
            raise ValueError(
                f"alltoall: the first dimension ({tensor.shape[0]}) must divide by the number "
                f"of ranks ({state.size}), or pass splits="
            )
        send = [tensor.shape[0] // state.size] * state.size
    else:
        send = [int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor) else splits)]
        if len(send) != state.size or sum(send) != tensor.shape[0] or min(send) < 0:
            raise ValueError(
                f"alltoall: splits={send} must hold {state.size} counts >= 0 summing to "
                f"the first dimension ({tensor.shape[0]})"
            )
    send_t = torch.tensor(send, dtype=torch.int64, device=tensor.device)
    recv_t = torch.empty_like(send_t)
    dist.all_to_all_single(recv_t, send_t, group=group)
    received = [int(n) for n in recv_t.tolist()]
    out = tensor.new_empty((sum(received), *tensor.shape[1:]))
    work = dist.all_to_all_single(
        out, tensor, output_split_sizes=received, input_split_sizes=send, group=group, async_op=True
    )
    if splits is None:
        return _Handle(work, lambda: out)
    return _Handle(work, lambda: (out, recv_t.cpu().to(torch.int32)))


def alltoall(
    tensor: torch.Tensor, splits: Any = None, name: str | None = None, process_set: Any = None
) -> Any:
    """Scatter slices of dimension 0 to every rank (``splits`` rows to each, equal slices by
    default) and gather theirs. With ``splits``, also the rows received from each rank, as Horovod."""
    return alltoall_async(tensor, splits, name).wait()


def barrier(process_set: Any = None) -> None:
    """Wait until every rank gets here."""
    _require_init()
    dist.barrier(group=_state.cpu_group)


def join(device: int = -1) -> int:
    """Wait until every rank has joined; the rank that joined last.

    Unlike Horovod's, a joined rank does not serve the collectives of ranks still training: every
    rank must finish its collectives (e.g. the same number of batches) before calling ``join``."""
    state = _require_init()
    state.joins += 1
    store = dist.distributed_c10d._get_default_store() if state.size > 1 else None
    if store is not None:
        arrived = store.add(f"horovod_join_{state.joins}", 1)
        if arrived == state.size:
            store.set(f"horovod_join_{state.joins}_last", str(state.rank))
        dist.barrier(group=state.cpu_group)
        return int(store.get(f"horovod_join_{state.joins}_last").decode())
    return state.rank


def _check_root(root_rank: int) -> None:
    state = _require_init()
    if not 0 <= int(root_rank) < state.size:
        raise ValueError(f"root_rank={root_rank}: must be in [0, {state.size})")
