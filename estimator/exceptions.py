"""Alias of :mod:`smlaunch.sdk.exceptions` (the import path of earlier releases)."""

from smlaunch.sdk.exceptions import *  # noqa: F403
from smlaunch.sdk.exceptions import __all__ as __all__
