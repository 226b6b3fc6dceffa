"""Alias of :mod:`smlaunch.sdk.sessions.local` (the import path of earlier releases)."""

from smlaunch.sdk.sessions.local import LocalSession as LocalSession

__all__ = ["LocalSession"]
