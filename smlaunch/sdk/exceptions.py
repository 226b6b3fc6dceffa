"""``sagemaker.exceptions``' import path: ``from smlaunch.sdk.exceptions import UnexpectedStatusException``
is the notebook's ``from sagemaker.exceptions import UnexpectedStatusException`` with the import changed.

The classes live in :mod:`smlaunch.sdk.errors`; this module only names them where SDK code looks.
"""

from __future__ import annotations

from smlaunch.sdk.errors import CapacityError, UnexpectedStatusException

__all__ = ["CapacityError", "UnexpectedStatusException"]
