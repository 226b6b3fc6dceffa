"""``smdistributed.modelparallel.torch.nn``: smp's modules (see :mod:`smlaunch.rank.smp.nn`)."""

from smlaunch.rank.smp.nn import *  # noqa: F403
from smlaunch.rank.smp.nn import __all__ as __all__
