"""``smdistributed.modelparallel.torch.nn``: smp's modules (see :mod:`runtime.parallel.nn`)."""

from runtime.parallel.nn import *  # noqa: F403
from runtime.parallel.nn import __all__ as __all__
