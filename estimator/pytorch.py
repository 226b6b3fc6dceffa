"""Alias of :mod:`smlaunch.sdk.pytorch` (the import path of earlier releases)."""

from smlaunch.sdk.pytorch import PyTorch as PyTorch

__all__ = ["PyTorch"]
