"""Registers the ``"smddp"`` process-group backend, as AWS's ``torch_smddp`` extension does.

After ``import smdistributed.dataparallel.torch.torch_smddp``,
``torch.distributed.init_process_group(backend="smddp")`` works: the backend is torch's NCCL when
this machine has CUDA devices and gloo otherwise (CPU tensors, local emulation). Importing twice,
or importing where a real ``smddp`` backend is already registered, changes nothing.
"""

from __future__ import annotations

import atexit
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from smlaunch.rank import cuda_emulation

BACKEND_NAME = "smddp"


def _uses_nccl() -> bool:
    """Real CUDA devices and NCCL (GPUs emulated on the CPU by smlaunch.rank.cuda_emulation use gloo)."""
    return cuda_emulation.active() is None and torch.cuda.is_available() and dist.is_nccl_available()


_shutdown_registered = False


def _shutdown() -> None:
    """At interpreter exit, destroy the process group the script left open (smddp samples never
    call ``destroy_process_group``); with gloo, a group still alive at exit can abort the rank
    ("terminate called without an active exception", exit 134) after training succeeded."""
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


def _create_backend(store: Any, rank: int, world_size: int, timeout: timedelta) -> Any:
    """Backend factory torch calls for every process group created with ``backend="smddp"``."""
    global _shutdown_registered
    if not _shutdown_registered:
        atexit.register(_shutdown)
        _shutdown_registered = True
    if _uses_nccl():
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world_size, options)
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


def register() -> None:
    """Register the backend once; a no-op when the name is already known to torch."""
    if hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    devices = ["cuda"] if _uses_nccl() else ["cpu"]
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=devices)


register()
