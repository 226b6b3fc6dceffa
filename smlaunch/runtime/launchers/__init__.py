"""Launch strategies, one module each. ``select_launcher`` picks one from the framework params.

A host reads its :class:`~smlaunch.contract.strategy.Strategy` from the wire flags
(:func:`host_strategy`; the wire is a host's input), and :data:`LAUNCHERS` gives the strategy's
launcher. Selection (``docs/architecture.md``, "Launcher selection"; first match wins), applied
only when this host's instance group is one of the distribution instance groups (else every host
of the group runs one plain process, as the toolkit does in heterogeneous clusters):

| flag                                                   | strategy                           | launcher     |
|--------------------------------------------------------|------------------------------------|--------------|
| ``sagemaker_mpi_enabled``, non-empty ``mp_parameters`` | ``modelparallel``                  | ``smp``      |
| ``sagemaker_mpi_enabled``                              | ``mpi``                            | ``mpi``      |
| ``sagemaker_pytorch_ddp_enabled``                      | ``pytorchddp``                     | ``torchrun`` |
| ``sagemaker_torch_distributed_enabled``                | ``torch_distributed``              | ``torchrun`` |
| ``sagemaker_distributed_dataparallel_enabled``         | ``smddp``                          | ``smddp``    |
| ``sagemaker_parameter_server_enabled``                 | ``parameter_server``               | ``process``  |
| ``sagemaker_multi_worker_mirrored_strategy_enabled``   | ``multi_worker_mirrored_strategy`` | ``process``  |
| none                                                   | ``none``                           | ``process``  |

``process`` starts one process per host; with a TensorFlow strategy it gets the toolkit's
``TF_CONFIG`` (see :mod:`smlaunch.runtime.frameworks.tf_config`), and with parameter servers it
also serves one (see :mod:`smlaunch.runtime.frameworks.tf_ps`). Model parallelism over
``torch_distributed`` (no MPI flag) reads as ``torch_distributed`` here: torchrun starts its ranks.

``sagemaker_pytorch_xla_multi_worker_enabled`` is refused with an error rather than silently run as
one process. Modules are imported only when chosen, so
starting a plain process never imports the MPI or model-parallel code.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from smlaunch import contract
from smlaunch.contract.errors import HostConfigurationError
from smlaunch.contract.hyperparameters import truthy
from smlaunch.contract.strategy import Strategy

if TYPE_CHECKING:
    from smlaunch.runtime.environment import Environment
    from smlaunch.runtime.launchers.launcher import Launcher


@dataclass(frozen=True)
class LauncherRef:
    """Where a launcher class lives, so that it is imported only when chosen."""

    name: str
    """The launcher's :attr:`~smlaunch.runtime.launchers.launcher.Launcher.name` (``LaunchPlan.launcher``)."""
    module: str
    class_name: str


_PROCESS = LauncherRef("process", "smlaunch.runtime.launchers.process", "ProcessLauncher")
_TORCHRUN = LauncherRef("torchrun", "smlaunch.runtime.launchers.torchrun", "TorchrunLauncher")

LAUNCHERS: Mapping[Strategy, LauncherRef] = {
    Strategy.NONE: _PROCESS,
    Strategy.PARAMETER_SERVER: _PROCESS,
    Strategy.MULTI_WORKER_MIRRORED_STRATEGY: _PROCESS,
    Strategy.TORCH_DISTRIBUTED: _TORCHRUN,
    Strategy.PYTORCHDDP: _TORCHRUN,
    Strategy.SMDDP: LauncherRef("smddp", "smlaunch.runtime.launchers.smddp", "SmddpLauncher"),
    Strategy.MPI: LauncherRef("mpi", "smlaunch.runtime.launchers.mpi.launcher", "MpiLauncher"),
    Strategy.MODELPARALLEL: LauncherRef("smp", "smlaunch.runtime.launchers.smp", "SmpLauncher"),
}
"""Each strategy's launcher (the module docstring's table)."""

_UNSUPPORTED = (contract.HP_PYTORCH_XLA_ENABLED,)


class LauncherUnavailableError(HostConfigurationError):
    """The chosen launcher's module is not part of this installation."""


def host_strategy(env: Environment) -> Strategy:
    """The strategy this host runs, from its wire flags by the table of the module docstring. Pure."""
    if not env.distribution_enabled:
        return Strategy.NONE
    params = env.framework_params
    for flag in _UNSUPPORTED:
        if truthy(params.get(flag, False)):
            raise HostConfigurationError(
                flag,
                params[flag],
                "is not supported by smlaunch's runtime",
                "use distribution torch_distributed, pytorchddp, smdistributed or mpi",
            )
    if truthy(params.get(contract.HP_MPI_ENABLED, False)):
        return Strategy.MODELPARALLEL if env.is_modelparallel_enabled else Strategy.MPI
    if truthy(params.get(contract.HP_PYTORCH_DDP_ENABLED, False)):
        return Strategy.PYTORCHDDP
    if truthy(params.get(contract.HP_TORCH_DISTRIBUTED_ENABLED, False)):
        return Strategy.TORCH_DISTRIBUTED
    if truthy(params.get(contract.HP_SMDDP_ENABLED, False)):
        return Strategy.SMDDP
    if truthy(params.get(contract.HP_PARAMETER_SERVER_ENABLED, False)):
        return Strategy.PARAMETER_SERVER
    if truthy(params.get(contract.HP_MWMS_ENABLED, False)):
        return Strategy.MULTI_WORKER_MIRRORED_STRATEGY
    return Strategy.NONE


def launcher_name(env: Environment) -> str:
    """The name of the launcher this host uses (its strategy's, by :data:`LAUNCHERS`). Pure."""
    return LAUNCHERS[host_strategy(env)].name


def launcher_class(ref: LauncherRef) -> type[Launcher]:
    """Import the launcher's module and return its class."""
    try:
        module = importlib.import_module(ref.module)
    except ModuleNotFoundError as error:
        if error.name != ref.module:
            raise
        raise LauncherUnavailableError(
            "launcher",
            ref.name,
            f"module {ref.module} is not part of this smlaunch installation",
            "install a complete smlaunch or choose another distribution",
        ) from error
    return getattr(module, ref.class_name)


def select_launcher(env: Environment, python: str = sys.executable) -> Launcher:
    """The launcher for this host, constructed on ``env``."""
    return launcher_class(LAUNCHERS[host_strategy(env)])(env, python=python)
