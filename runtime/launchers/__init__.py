"""Launch strategies, one module each. ``select_launcher`` picks one from the framework params.

Selection (``docs/architecture.md``, "Launcher selection"; first match wins), applied only when
this host's instance group is one of the distribution instance groups (else every host of the group
runs one plain process, as the
toolkit does in heterogeneous clusters):

- ``sagemaker_mpi_enabled`` with non-empty ``mp_parameters``: ``smp:SmpLauncher``
- ``sagemaker_mpi_enabled``: ``mpi:MpiLauncher``
- ``sagemaker_pytorch_ddp_enabled`` or ``sagemaker_torch_distributed_enabled``: ``torchrun:TorchrunLauncher``
- ``sagemaker_distributed_dataparallel_enabled``: ``smddp:SmddpLauncher``
- none, or TensorFlow's ``sagemaker_multi_worker_mirrored_strategy_enabled`` /
  ``sagemaker_parameter_server_enabled``: ``process:ProcessLauncher`` (one process per host; with a
  TensorFlow strategy it gets the toolkit's ``TF_CONFIG``, see :mod:`runtime.tf_config`, and with
  parameter servers it also serves one, see :mod:`runtime.tf_ps`)

``sagemaker_pytorch_xla_multi_worker_enabled`` is refused with an error rather than silently run as
one process. Modules are imported only when chosen, so
starting a plain process never imports the MPI or model-parallel code.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

from runtime import contract
from runtime.errors import HostConfigurationError
from runtime.hyperparameters import truthy

if TYPE_CHECKING:
    from runtime.environment import Environment
    from runtime.launchers.base import Launcher

LAUNCHERS: dict[str, tuple[str, str]] = {
    "process": ("runtime.launchers.process", "ProcessLauncher"),
    "torchrun": ("runtime.launchers.torchrun", "TorchrunLauncher"),
    "smddp": ("runtime.launchers.smddp", "SmddpLauncher"),
    "mpi": ("runtime.launchers.mpi", "MpiLauncher"),
    "smp": ("runtime.launchers.smp", "SmpLauncher"),
}

_UNSUPPORTED = (contract.HP_PYTORCH_XLA_ENABLED,)


class LauncherUnavailableError(HostConfigurationError):
    """The chosen launcher's module is not part of this installation."""


def launcher_name(env: Environment) -> str:
    """The launcher this host uses, by the table of the module docstring. Pure."""
    if not env.distribution_enabled:
        return "process"
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
        return "smp" if env.is_modelparallel_enabled else "mpi"
    if truthy(params.get(contract.HP_PYTORCH_DDP_ENABLED, False)) or truthy(
        params.get(contract.HP_TORCH_DISTRIBUTED_ENABLED, False)
    ):
        return "torchrun"
    if truthy(params.get(contract.HP_SMDDP_ENABLED, False)):
        return "smddp"
    return "process"


def launcher_class(name: str) -> type[Launcher]:
    """Import ``runtime.launchers.<module>`` and return its launcher class."""
    module_name, class_name = LAUNCHERS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        raise LauncherUnavailableError(
            "launcher",
            name,
            f"module {module_name} is not part of this smlaunch installation",
            "install a complete smlaunch or choose another distribution",
        ) from error
    return getattr(module, class_name)


def select_launcher(env: Environment, python: str = sys.executable) -> Launcher:
    """The launcher for this host, constructed on ``env``."""
    return launcher_class(launcher_name(env))(env, python=python)
