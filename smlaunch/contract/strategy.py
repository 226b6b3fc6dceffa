"""The distribution strategies: one vocabulary for the notebook, the backends and the hosts.

Owns :class:`Strategy`. The SDK derives one from the user's ``distribution``
(``Distribution.strategy``), a backend declares the ones it runs (``Capabilities.distributions``),
and a host derives one from the wire flags in ``hyperparameters.json`` and looks its launcher up
in the runtime's table (:data:`smlaunch.runtime.launchers.LAUNCHERS`). The values are the SDK's
names, which appear in error messages (``distribution='mpi': ...``).
"""

from __future__ import annotations

from enum import Enum


class Strategy(str, Enum):
    """How a job's ranks are started. ``none`` is one plain process per host."""

    NONE = "none"
    MODELPARALLEL = "modelparallel"
    MPI = "mpi"
    TORCH_DISTRIBUTED = "torch_distributed"
    PYTORCHDDP = "pytorchddp"
    SMDDP = "smddp"
    PARAMETER_SERVER = "parameter_server"
    MULTI_WORKER_MIRRORED_STRATEGY = "multi_worker_mirrored_strategy"

    def __str__(self) -> str:
        # The name users wrote in ``distribution``; Python 3.11 changed a str mix-in's default.
        return self.value
