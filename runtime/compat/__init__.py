"""Importable shims of the ``smdistributed`` API for machines without AWS's library.

This directory (not the ``runtime.compat`` package) is what goes on the user's ``PYTHONPATH``, so
``runtime/compat/smdistributed/dataparallel/...`` imports as ``smdistributed.dataparallel...``. It is
put there only when the real ``smdistributed`` is not importable, so on a SageMaker image with AWS's
library the shims never shadow it. Nothing here is imported by the runtime itself.

``horovod_shim/`` is a second root of the same kind, for ``horovod.torch`` (see
:func:`runtime.env_vars.horovod_compat_dir`): it has its own root so that each shim is added only
where its own library is missing.
"""

from __future__ import annotations


def compat_path() -> str | None:
    """The directory to prepend to the user's ``PYTHONPATH``, or None when the real
    ``smdistributed`` is importable. Looks the package up without importing it (no user code runs).

    The lookup itself lives in :func:`runtime.env_vars.compat_dir` (which builds every rank's
    ``PYTHONPATH``); this is its string-valued public name.
    """
    from runtime.env_vars import compat_dir

    found = compat_dir()
    return None if found is None else str(found)
