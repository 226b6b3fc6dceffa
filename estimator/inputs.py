"""Alias of :mod:`smlaunch.sdk.inputs` (the import path of earlier releases)."""

from smlaunch.sdk.inputs import ShuffleConfig as ShuffleConfig
from smlaunch.sdk.inputs import TrainingInput as TrainingInput

__all__ = ["ShuffleConfig", "TrainingInput"]
