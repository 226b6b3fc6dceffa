"""Alias of :mod:`smlaunch.sdk.estimator` (the import path of earlier releases)."""

from smlaunch.sdk.estimator import Estimator as Estimator
from smlaunch.sdk.estimator import Framework as Framework

__all__ = ["Estimator", "Framework"]
