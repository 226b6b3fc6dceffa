"""Importable shims of the ``smdistributed`` API for machines without AWS's library.

This directory (not the ``smlaunch.rank.compat`` package) is what goes on the user's ``PYTHONPATH``, so
``smlaunch/rank/compat/smdistributed/dataparallel/...`` imports as ``smdistributed.dataparallel...``. It is
put there only when the real ``smdistributed`` is not importable, so on a SageMaker image with AWS's
library the shims never shadow it. Nothing here is imported by the runtime itself.

``horovod_shim/`` is a second root of the same kind, for ``horovod.torch`` (see
:func:`smlaunch.runtime.env_vars.horovod_compat_dir`): it has its own root so that each shim is added only
where its own library is missing.
"""
