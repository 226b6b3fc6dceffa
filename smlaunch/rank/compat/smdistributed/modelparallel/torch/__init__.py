"""``smdistributed.modelparallel.torch`` (smp v1) on torch.distributed.pipelining.

A thin namespace over :mod:`smlaunch.rank.smp.api`; see that package for the engine and
``docs/smp.md`` for how it maps the API it reproduces.

Auto-init, as smp does it: when ``SM_HP_MP_PARAMETERS`` and ``OMPI_COMM_WORLD_RANK`` are both set
(smlaunch's smp launcher sets both) and ``SMP_MANUAL_INIT`` is not ``1``, importing this package calls
``init()``; a later ``smp.init(...)`` in the script then warns and is ignored.

``smp.amp`` (``GradScaler``) and ``smp.nn`` (modules that reduce to torch's) are submodules; a name
smp v1 has and this engine does not raises an error naming what to use instead.
"""

from __future__ import annotations

import os as _os

from smlaunch.rank.smp.api import *  # noqa: F403
from smlaunch.rank.smp.api import __all__ as _api_all
from smlaunch.rank.smp.api import init as _init
from smlaunch.rank.smp.config import MANUAL_INIT_ENV as _MANUAL_INIT_ENV
from smlaunch.rank.smp.config import MP_PARAMETERS_ENV as _MP_PARAMETERS_ENV

from . import amp, nn  # smp.amp.GradScaler, smp.nn.DistributedLinear, ...

__all__ = [*_api_all, "amp", "nn"]


def __getattr__(name: str) -> object:
    from smlaunch.rank.smp.api import unknown_name

    raise unknown_name(__name__, name)


def _auto_init() -> None:
    env = _os.environ
    if _MP_PARAMETERS_ENV in env and "OMPI_COMM_WORLD_RANK" in env and env.get(_MANUAL_INIT_ENV) != "1":
        _init()


_auto_init()
