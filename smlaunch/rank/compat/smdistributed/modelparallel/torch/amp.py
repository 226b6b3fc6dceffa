"""``smdistributed.modelparallel.torch.amp``: smp's ``GradScaler`` (see :mod:`runtime.parallel.amp`)."""

from runtime.parallel.amp import GradScaler

__all__ = ["GradScaler"]
