"""How the local agent starts a job's hosts, behind :class:`.base.Executor`: :mod:`.process` (local
processes, the default), :mod:`.docker` (one container per host) or :mod:`.slurm` (one ``srun``
step per node of a Slurm allocation; used by :mod:`estimator.backends.slurm`).

:data:`EXECUTORS` names each executor class by the name ``LocalSession(executor=...)`` and
``settings.json`` use; nothing is imported until :func:`executor_class` asks for one (the Docker SDK
only loads for Docker jobs).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from estimator.backends.local.executors.base import Executor

EXECUTORS: dict[str, str] = {
    "process": "estimator.backends.local.executors.process:ProcessExecutor",
    "docker": "estimator.backends.local.executors.docker:DockerExecutor",
    "slurm": "estimator.backends.local.executors.slurm:SlurmExecutor",
}
"""Executor name -> ``module:class``. A new executor adds one entry."""


def executor_class(name: str) -> type[Executor]:
    """The executor class called ``name`` (a key of :data:`EXECUTORS`)."""
    module, _, attribute = EXECUTORS[name].partition(":")
    cls: type[Executor] = getattr(importlib.import_module(module), attribute)
    return cls
