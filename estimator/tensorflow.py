"""Alias of :mod:`smlaunch.sdk.tensorflow` (the import path of earlier releases)."""

from smlaunch.sdk.tensorflow import TensorFlow as TensorFlow

__all__ = ["TensorFlow"]
