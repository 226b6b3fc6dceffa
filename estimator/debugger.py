"""Alias of :mod:`smlaunch.sdk.debugger` (the import path of earlier releases)."""

from smlaunch.sdk.debugger import TensorBoardOutputConfig as TensorBoardOutputConfig

__all__ = ["TensorBoardOutputConfig"]
