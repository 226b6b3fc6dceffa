"""SDK 2.23x's ``sagemaker.modules.distributed``: ``Torchrun``, ``MPI``, ``SMP``."""

from smlaunch.sdk.train.distributed import *  # noqa: F403
from smlaunch.sdk.train.distributed import __all__ as __all__
