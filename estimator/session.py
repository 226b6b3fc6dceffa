"""Alias of :mod:`smlaunch.sdk.sessions.sagemaker` (the import path of earlier releases)."""

from smlaunch.sdk.sessions.sagemaker import Session as Session

__all__ = ["Session"]
