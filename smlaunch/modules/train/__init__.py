"""SDK 2.23x's ``sagemaker.modules.train``: ``ModelTrainer`` and ``Mode``."""

from smlaunch.sdk.train.model_trainer import Mode, ModelTrainer

__all__ = ["Mode", "ModelTrainer"]
