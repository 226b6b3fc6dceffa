"""``smdistributed.dataparallel.torch.parallel.distributed.DistributedDataParallel``.

torch's ``DistributedDataParallel`` with smddp's constructor. smddp scripts often pass
``device_ids=[local_rank]`` unconditionally; torch refuses device ids for a CPU module, so they are
dropped when the module's parameters live on the CPU (local emulation), and kept otherwise.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel as _TorchDDP

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(_TorchDDP):
    """smddp's DDP wrapper: gradients are averaged across every rank of the job after backward."""

    def __init__(
        self,
        module: torch.nn.Module,
        device_ids: list[Any] | None = None,
        output_device: Any = None,
        broadcast_buffers: bool = True,
        process_group: Any = None,
        bucket_cap_mb: float | None = None,
        **kwargs: Any,
    ) -> None:
        params = list(module.parameters())
        if params and all(p.device.type == "cpu" for p in params):
            device_ids, output_device = None, None
        if bucket_cap_mb is not None:
            kwargs["bucket_cap_mb"] = bucket_cap_mb
        if not broadcast_buffers:  # torch >= 2.13 warns on the argument, so pass it only when set
            kwargs["broadcast_buffers"] = False
        super().__init__(
            module,
            device_ids=device_ids,
            output_device=output_device,
            process_group=process_group,
            **kwargs,
        )
