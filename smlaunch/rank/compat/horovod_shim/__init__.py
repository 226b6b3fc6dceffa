"""The root of the ``horovod`` shim: this directory (not the ``smlaunch.rank.compat.horovod_shim``
package) goes on the user's ``PYTHONPATH``, so ``horovod_shim/horovod/torch`` imports as
``horovod.torch``. It is put there only when the real ``horovod`` is not importable (see
:func:`smlaunch.runtime.env_vars.horovod_compat_dir`), independently of the smdistributed shims.
"""
