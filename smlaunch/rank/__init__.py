"""Code loaded into the user's processes (every rank): :mod:`.boot` (the rank bootstrap, started by
``_site/sitecustomize.py``), :mod:`.cuda_emulation`, :mod:`.compat` (the ``smdistributed`` and
``horovod`` shims) and :mod:`.smp` (the model-parallel engine behind ``smdistributed.modelparallel``).

Everything here lives under ``smlaunch``, a name no user module takes, and imports nothing of ours
by any other name, so a user's ``runtime.py`` or ``contract.py`` is theirs alone.
"""
