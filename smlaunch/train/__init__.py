"""``from smlaunch.train import ModelTrainer``: SDK v3's ``sagemaker.train``, on smlaunch.

The config classes are in :mod:`smlaunch.train.configs` and the distributed ones in
:mod:`smlaunch.train.distributed`, as v3 has them; a v3 cell changes only ``sagemaker`` to
``smlaunch`` in its imports. Imported lazily, as :mod:`smlaunch` is.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from smlaunch.sdk.train.model_trainer import Mode, ModelTrainer

__all__ = ["Mode", "ModelTrainer"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from smlaunch.sdk.train import model_trainer

        return getattr(model_trainer, name)
    raise AttributeError(f"module 'smlaunch.train' has no attribute {name!r}")
