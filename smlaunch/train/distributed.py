"""SDK v3's ``sagemaker.train.distributed``: ``Torchrun``, ``MPI``, ``SMP``."""

from smlaunch.sdk.train.distributed import *  # noqa: F403
from smlaunch.sdk.train.distributed import __all__ as __all__
