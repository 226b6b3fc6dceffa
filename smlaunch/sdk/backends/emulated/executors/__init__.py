"""How the local agent starts a job's hosts, behind :class:`.base.Executor`: :mod:`.process` (local
processes, the default), :mod:`.docker` (one container per host) or :mod:`.slurm` (one ``srun``
step per node of a Slurm allocation; used by :mod:`smlaunch.sdk.backends.slurm.backend`).

:data:`EXECUTORS` names each executor class by the name ``LocalSession(executor=...)`` and
``settings.json`` use; nothing is imported until :func:`executor_class` asks for one (the Docker SDK
only loads for Docker jobs).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from smlaunch.sdk.backends.emulated.executors.base import Executor

EXECUTORS: dict[str, str] = {
    "process": "smlaunch.sdk.backends.emulated.executors.process.executor:ProcessExecutor",
    "docker": "smlaunch.sdk.backends.emulated.executors.docker.executor:DockerExecutor",
    "slurm": "smlaunch.sdk.backends.emulated.executors.slurm.executor:SlurmExecutor",
    "kubernetes": "smlaunch.sdk.backends.kubernetes.executor:KubernetesExecutor",
}
"""Executor name -> ``module:class``. A new executor adds one entry, and the model of its own
fields to :data:`smlaunch.sdk.backends.emulated.job_settings.ExecutorSettings`."""


def executor_class(name: str) -> type[Executor]:
    """The executor class called ``name`` (a key of :data:`EXECUTORS`)."""
    module, _, attribute = EXECUTORS[name].partition(":")
    cls: type[Executor] = getattr(importlib.import_module(module), attribute)
    return cls
