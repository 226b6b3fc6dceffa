"""The import path of earlier releases: ``from estimator import PyTorch`` keeps working.

New code imports :mod:`smlaunch` (``from smlaunch import PyTorch, LocalSession``), a name no file of
the user's can shadow: an ``estimator.py`` beside a notebook hides this package, never ``smlaunch``.
The documented submodules (``estimator.pytorch``, ``estimator.inputs``, ...) are kept as aliases too.
Importing it has no side effects.
"""

from __future__ import annotations

from typing import Any

import smlaunch
from smlaunch import __all__ as __all__


def __getattr__(name: str) -> Any:
    return getattr(smlaunch, name)
