"""SDK v3's ``sagemaker.train.configs``: the config classes of ``ModelTrainer``."""

from smlaunch.sdk.train.configs import *  # noqa: F403
from smlaunch.sdk.train.configs import __all__ as __all__
