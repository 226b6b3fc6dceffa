"""SDK 2.23x's ``sagemaker.modules.configs``: the config classes of ``ModelTrainer``."""

from smlaunch.sdk.train.configs import *  # noqa: F403
from smlaunch.sdk.train.configs import __all__ as __all__
