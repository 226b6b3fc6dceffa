"""``smdistributed.modelparallel.torch.amp``: smp's ``GradScaler`` (see :mod:`smlaunch.rank.smp.amp`)."""

from smlaunch.rank.smp.amp import GradScaler

__all__ = ["GradScaler"]
