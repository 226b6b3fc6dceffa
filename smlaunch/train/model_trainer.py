"""SDK v3's ``sagemaker.train.model_trainer``: ``ModelTrainer`` and ``Mode``."""

from smlaunch.sdk.train.model_trainer import Mode, ModelTrainer

__all__ = ["Mode", "ModelTrainer"]
