"""``smp.amp``: smp v1's ``GradScaler`` (``smdistributed.modelparallel.torch.amp.GradScaler``).

smp documents it as a drop-in replacement for ``torch.cuda.amp.GradScaler`` for model-parallel
training: the ranks of a step hold different parameters (pipeline stages) and different data (data
parallel replicas), so an inf/NaN gradient found on any rank must make *every* rank skip the step
and lower the scale together, or the replicas and stages would drift apart. This one is
``torch.amp.GradScaler("cuda")`` with exactly that: after unscaling, the found-inf flag is reduced
(max) over every rank of the job.

With real CUDA it scales fp16 losses as torch's does. Without (a CPU machine, or CUDA emulated on
the CPU by ``smlaunch/rank/cuda_emulation.py``) it is disabled, a pass-through, as torch disables its own
there: ``scale(loss)`` returns the loss, ``step(optimizer)`` steps, ``update()`` does nothing and
``get_scale()`` is 1.0, so the numbers are those of a run without it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from smlaunch.rank import cuda_emulation

__all__ = ["GradScaler"]


class GradScaler(torch.amp.GradScaler):
    """``smp.amp.GradScaler``: ``torch.amp.GradScaler`` whose skip decisions every rank shares."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        real_cuda = cuda_emulation.active() is None and torch.cuda.is_available()
        super().__init__(
            "cuda",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled and real_cuda,
        )

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        super().unscale_(optimizer)
        if not self._enabled or not dist.is_initialized():
            return
        found = self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        assert self._scale is not None
        flag = torch.zeros(1, dtype=torch.float32, device=self._scale.device)
        for value in found.values():
            flag = torch.maximum(flag, value.to(flag.device))
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every stage and replica agrees on skipping
        for device in list(found) or [self._scale.device]:
            found[device] = flag.to(device)
