"""Process-wide smp state: ``init``, the process group, the mesh, and the rank/size/group family.

smp v1 is a process-global library (one ``smp.init``, one ``DistributedModel``); this module holds that
state in one object, :data:`STATE`. ``init`` resolves the configuration (user dict merged with
``SM_HP_MP_PARAMETERS``, environment wins), checks the world size, starts ``torch.distributed`` from the
torchrun variables or, under mpirun, from ``OMPI_COMM_WORLD_*``, builds the DeviceMesh whose dimension
names are the placement letters, and the process groups of every :class:`CommGroup`.
"""

from __future__ import annotations

import atexit
import gc
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from smlaunch.contract.processes import free_port
from smlaunch.rank import cuda_emulation
from smlaunch.rank.smp.config import (
    ModelParallelConfig,
    SMPValidationError,
    check_world_size,
    resolve_config,
    virtual_stages,
)
from smlaunch.rank.smp.layout import CommGroup, RankLayout, RankType, build_mesh

PROCESS_GROUP_TIMEOUT = timedelta(minutes=30)


@dataclass
class State:
    """Everything ``smp.init`` establishes; ``initialized`` is False until it has run."""

    initialized: bool = False
    config: ModelParallelConfig | None = None
    layout: RankLayout | None = None
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_size: int = 1
    virtual_stages: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    mesh: Any = None
    groups: dict[str, Any] = field(default_factory=dict)
    owns_process_group: bool = False
    model: Any = None
    optimizer: Any = None
    step_context: Any = None

    @property
    def cfg(self) -> Any:
        """smp's ``state.cfg``: the resolved configuration, one attribute per parameter."""
        import types

        return types.SimpleNamespace(**self.require().config.values)  # type: ignore[union-attr]

    @property
    def pp(self) -> int:
        return self.require().config.pp  # type: ignore[union-attr]

    def require(self) -> State:
        if not self.initialized:
            raise SMPValidationError(
                "smp.init() must be called before using the smdistributed.modelparallel API."
            )
        return self

    def coords(self) -> dict[str, int]:
        return self.require().layout.coords(self.rank)  # type: ignore[union-attr]

    def group_rank(self, letters: str) -> int:
        return self.require().layout.group_rank(self.rank, letters)  # type: ignore[union-attr]

    def group_size(self, letters: str) -> int:
        return self.require().layout.group_size(letters)  # type: ignore[union-attr]

    def group_ranks(self, letters: str) -> list[int]:
        return self.require().layout.group_of(self.rank, letters)  # type: ignore[union-attr]

    def process_group(self, letters: str) -> Any:
        return self.require().groups[letters]

    def global_rank(self, group_rank: int, letters: str) -> int:
        return self.require().layout.global_rank(self.rank, group_rank, letters)  # type: ignore[union-attr]


STATE = State()


def _rank_env(environ: Mapping[str, str]) -> tuple[int, int, int, int]:
    """(rank, world, local_rank, local_size) from torchrun variables, else OpenMPI's, else single."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        rank, world = int(environ["RANK"]), int(environ["WORLD_SIZE"])
        local_rank = int(environ.get("LOCAL_RANK", environ.get("OMPI_COMM_WORLD_LOCAL_RANK", 0)))
        local_size = int(environ.get("LOCAL_WORLD_SIZE", environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", world)))
        return rank, world, local_rank, local_size
    if "OMPI_COMM_WORLD_RANK" in environ:
        return (
            int(environ["OMPI_COMM_WORLD_RANK"]),
            int(environ["OMPI_COMM_WORLD_SIZE"]),
            int(environ.get("OMPI_COMM_WORLD_LOCAL_RANK", 0)),
            int(environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", 1)),
        )
    return 0, 1, 0, 1


def _real_cuda() -> bool:
    """CUDA devices exist (not merely emulated on the CPU by smlaunch.rank.cuda_emulation)."""
    return cuda_emulation.active() is None and torch.cuda.is_available()


def _backend(config: ModelParallelConfig) -> str:
    choice = config.values["ddp_dist_backend"]
    if choice == "auto":
        return "nccl" if _real_cuda() else "gloo"
    if choice == "nccl" and cuda_emulation.active() is not None:
        return "gloo"  # the emulation's rule: NCCL requested -> gloo
    if choice == "nccl" and not torch.cuda.is_available():
        raise SMPValidationError(
            "ddp_dist_backend='nccl' needs CUDA GPUs, and none is available; use 'auto' or 'gloo' on CPU."
        )
    return str(choice)


def init(config: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> None:
    """smp.init: validate, start the process group, build the mesh and groups. Idempotent (warns)."""
    if STATE.initialized:
        warnings.warn("smp.init() was already called; this call is ignored.", stacklevel=2)
        return
    env = os.environ if environ is None else environ
    cfg = resolve_config(config, env)
    v = virtual_stages(env)
    if v > 1 and cfg.values["pipeline"] != "interleaved":
        raise SMPValidationError("SMP_TORCH_VIRTUAL_STAGES > 1 requires pipeline='interleaved'.")
    rank, world, local_rank, local_size = _rank_env(env)
    check_world_size(cfg, world)
    backend = _backend(cfg)
    owns = False
    if not dist.is_initialized():
        if world == 1 and "MASTER_ADDR" not in env:
            dist.init_process_group(
                backend,
                init_method=f"tcp://127.0.0.1:{free_port()}",
                rank=0,
                world_size=1,
                timeout=PROCESS_GROUP_TIMEOUT,
            )
        else:
            env = dict(env)
            # under a plain mpirun (no torchrun variables) the SageMaker master is the rendezvous point
            env.setdefault("MASTER_ADDR", env.get("SM_MASTER_ADDR", ""))
            env.setdefault("MASTER_PORT", env.get("SM_MASTER_PORT", ""))
            if not env["MASTER_ADDR"] or not env["MASTER_PORT"]:
                raise SMPValidationError(
                    "MASTER_ADDR and MASTER_PORT must be set to start a multi-process smp job "
                    "(the smlaunch runtime sets them)."
                )
            os.environ.setdefault("MASTER_ADDR", env["MASTER_ADDR"])
            os.environ.setdefault("MASTER_PORT", env["MASTER_PORT"])
            dist.init_process_group(
                backend, init_method="env://", rank=rank, world_size=world, timeout=PROCESS_GROUP_TIMEOUT
            )
        owns = True
    else:
        rank, world = dist.get_rank(), dist.get_world_size()
        check_world_size(cfg, world)
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    elif cuda_emulation.active() is not None:
        torch.cuda.set_device(local_rank)  # as smp.init does; the emulated device keeps tensors on CPU
    layout = RankLayout(world, cfg.pp, cfg.tp, cfg.placement)
    mesh = build_mesh(layout, device.type)
    coordinate = mesh.get_coordinate()
    expected = [layout.coords(rank)[c] for c in layout.strategy]
    if list(coordinate) != expected:  # the mesh must be exactly smp's layout
        raise RuntimeError(f"DeviceMesh coordinate {coordinate} != smp layout {expected} for rank {rank}")
    groups: dict[str, Any] = {letter: mesh[letter].get_group() for letter in layout.strategy}
    for letters in ("DT", "PT"):
        mine = None
        for ranks in layout.all_groups(letters):  # every rank creates every group, in the same order
            pg = dist.new_group(ranks)
            if rank in ranks:
                mine = pg
        groups[letters] = mine
    groups["DPT"] = dist.group.WORLD
    if rank == 0:
        for key, why in cfg.ignored():
            warnings.warn(f"smp config parameter {key} has no effect in smlaunch: {why}.", stacklevel=2)
    atexit.unregister(_release_at_exit)  # once per process, however often tests re-init
    atexit.register(_release_at_exit)
    STATE.__dict__.update(
        initialized=True,
        config=cfg,
        layout=layout,
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_size=local_size,
        virtual_stages=v,
        device=device,
        mesh=mesh,
        groups=groups,
        owns_process_group=owns,
        model=None,
        optimizer=None,
        step_context=None,
    )


def shutdown() -> None:
    """Forget the smp state (and destroy the process group when ``init`` created it). For tests."""
    if STATE.owns_process_group and dist.is_initialized():
        dist.destroy_process_group()
    STATE.__dict__.update(State().__dict__)


def _release_at_exit() -> None:
    """At interpreter exit, drop every reference the smp state holds (the mesh, the subgroups, the
    model and optimizer) and free them while the interpreter is whole. Left to finalization, a gloo
    group held here is freed after Python refuses its worker threads the GIL, and the rank aborts
    ("terminate called without an active exception", exit 134) after training succeeded: the
    rank bootstrap's exit handler destroys the groups, but cannot free ones this state still holds.
    Never raises: it runs after the script's outcome is decided."""
    try:
        shutdown()
    except Exception:  # a group that cannot be closed cleanly is left to the interpreter
        STATE.__dict__.update(State().__dict__)
    gc.collect()


def letters_of(group: CommGroup | RankType) -> str:
    return group.value
