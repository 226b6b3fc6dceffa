"""Rendering a host's :class:`~smlaunch.runtime.environment.Environment` into variables.

:func:`to_env_vars` writes every ``SM_*`` variable with the exact formats of SageMaker's training
toolkit (``sagemaker_training.environment.Environment.to_env_vars``, checked by
``tests/unit/test_environment_oracle.py``), :func:`training_env` the ``SM_TRAINING_ENV`` document and
:func:`process_env` the environment every process of the host starts with. Reading ``/opt/ml`` into
the ``Environment`` is :mod:`smlaunch.runtime.environment`, which knows nothing of this module;
launchers call these functions with the host's ``Environment``.

Deliberate differences from the toolkit's ``to_env_vars`` (everything else is equal):

- extra variables ``SM_MASTER_ADDR``, ``SM_MASTER_PORT``, ``SM_HOST_COUNT``,
  ``SM_CURRENT_HOST_RANK`` (SDK v3 names; the toolkit sets none of them);
- ``SM_NUM_CPUS`` / ``SM_NUM_GPUS`` honour the ``SMLAUNCH_*`` pins above;
- ``SM_TRAINING_ENV.is_modelparallel_enabled`` says what the user's process sees when
  ``mp_parameters`` is set (the toolkit's first ``Environment()`` in a process reports ``null``,
  because it reads ``SM_HP_MP_PARAMETERS`` before anyone has exported it);
- ``SAGEMAKER_SUBMIT_DIRECTORY`` / ``SAGEMAKER_CONTAINER_LOG_LEVEL`` are ignored exactly as the
  toolkit ignores them (hyperparameters win); ``SAGEMAKER_PROGRAM`` beats ``sagemaker_program``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from smlaunch import contract
from smlaunch.contract import hyperparameters as hp
from smlaunch.contract.framework_env import pytorch_container_env
from smlaunch.runtime.environment import Environment


def training_env(environment: Environment) -> dict[str, Any]:
    """``SM_TRAINING_ENV``: every property of the toolkit's ``Environment``, same keys."""
    paths = environment.paths
    path = environment.environ.get("PATH")
    return {
        "additional_framework_parameters": environment.framework_params,
        "channel_input_dirs": environment.channel_input_dirs,
        "current_host": environment.current_host,
        "current_instance_group": environment.current_group_name,
        "current_instance_group_hosts": environment.current_instance_group_hosts,
        "current_instance_type": environment.current_instance_type,
        "distribution_hosts": environment.distribution_hosts,
        "distribution_instance_groups": environment.distribution_instance_groups,
        "framework_module": environment.framework_module,
        "hosts": environment.hosts,
        "hyperparameters": environment.hyperparameters,
        "input_config_dir": str(paths.input_config_dir),
        "input_data_config": environment.input_data_config,
        "input_dir": str(paths.input_dir),
        "instance_groups": environment.instance_groups,
        "instance_groups_dict": environment.instance_groups_dict,
        "is_hetero": environment.is_hetero,
        "is_master": environment.is_master,
        "is_modelparallel_enabled": environment.is_modelparallel_enabled,
        "is_smddpmprun_installed": shutil.which("smddpmprun", path=path) is not None,
        "is_smddprun_installed": shutil.which("smddprun", path=path) is not None,
        "job_name": environment.job_name,
        "log_level": environment.log_level,
        "master_hostname": environment.master_hostname,
        "model_dir": environment.model_dir,
        "module_dir": environment.module_dir,
        "module_name": environment.module_name,
        "network_interface_name": environment.network_interface_name,
        "num_cpus": environment.num_cpus,
        "num_gpus": environment.num_gpus,
        "num_neurons": environment.num_neurons,
        "output_data_dir": str(paths.output_data_dir),
        "output_dir": str(paths.output_dir),
        "output_intermediate_dir": str(paths.output_intermediate_dir),
        "resource_config": environment.resource_config,
        "topology": environment.topology,
        "user_entry_point": environment.user_entry_point,
    }


def to_env_vars(environment: Environment) -> dict[str, str]:
    """Every ``SM_*`` variable with the toolkit's formats, plus the SDK-v3 extras."""
    paths = environment.paths
    values: dict[str, Any] = {
        "hosts": environment.hosts,
        "network_interface_name": environment.network_interface_name,
        "hps": environment.hyperparameters,
        "user_entry_point": environment.user_entry_point,
        "framework_params": environment.framework_params,
        "resource_config": environment.resource_config,
        "input_data_config": environment.input_data_config,
        "output_data_dir": str(paths.output_data_dir),
        "channels": sorted(environment.channel_input_dirs),
        "current_host": environment.current_host,
        "current_instance_type": environment.current_instance_type,
        "current_instance_group": environment.current_group_name,
        "current_instance_group_hosts": environment.current_instance_group_hosts,
        "instance_groups": environment.instance_groups,
        "instance_groups_dict": environment.instance_groups_dict,
        "distribution_instance_groups": environment.distribution_instance_groups,
        "is_hetero": environment.is_hetero,
        "module_name": environment.module_name,
        "log_level": environment.log_level,
        "framework_module": environment.framework_module,
        "input_dir": str(paths.input_dir),
        "input_config_dir": str(paths.input_config_dir),
        "output_dir": str(paths.output_dir),
        "num_cpus": environment.num_cpus,
        "num_gpus": environment.num_gpus,
        "num_neurons": environment.num_neurons,
        "model_dir": environment.model_dir,
        "module_dir": environment.module_dir,
        "training_env": training_env(environment),
        "user_args": environment.user_args(),
        "output_intermediate_dir": str(paths.output_intermediate_dir),
    }
    if environment.topology:
        values["topology"] = environment.topology
    for name, path in environment.channel_input_dirs.items():
        values[f"channel_{name}"] = path
    for key, value in environment.hyperparameters.items():
        values[f"hp_{key}"] = value
    env = {contract.SM_PREFIX + str(k).upper(): hp.env_value(v) for k, v in values.items()}
    env[contract.SM_MASTER_ADDR] = environment.master_addr
    env[contract.SM_MASTER_PORT] = str(environment.master_port)
    env[contract.SM_HOST_COUNT] = str(environment.host_count)
    env[contract.SM_CURRENT_HOST_RANK] = str(environment.host_rank)
    return env


def process_env(environment: Environment) -> dict[str, str]:
    """The environment every process of this host starts with.

    The runtime's own environment, plus the ``SM_*`` variables, plus what the toolkit exports
    into its process (``CURRENT_HOST``, ``SAGEMAKER_JOB_NAME``, ``SAGEMAKER_REGION``), plus a
    ``PYTHONPATH`` that starts with the code dir and, when the real library is not importable,
    ``smlaunch/rank/compat`` (the smdistributed API shims) and ``smlaunch/rank/compat/horovod_shim`` (the
    ``horovod.torch`` API on torch.distributed). A job of SageMaker's PyTorch image also gets the
    ``MASTER_ADDR`` / ``MASTER_PORT`` that image exports for every job
    (:func:`smlaunch.contract.framework_env.pytorch_container_env`); ranked launchers set the same values.
    A ModelTrainer job's processes get SDK v3's variables instead (:func:`smlaunch.runtime.v3.process_env`).
    """
    if environment.v3 is not None:
        from smlaunch.runtime import v3

        return v3.process_env(environment)
    env = dict(environment.environ)
    env.update(to_env_vars(environment))
    env["CURRENT_HOST"] = environment.current_host
    env["SAGEMAKER_JOB_NAME"] = str(environment.sagemaker_hyperparameters.get(contract.HP_JOB_NAME, "") or "")
    region = (
        environment.sagemaker_hyperparameters.get(contract.HP_REGION)
        or environment.environ.get("AWS_REGION")
        or environment.environ.get("AWS_DEFAULT_REGION")
        or ""
    )
    env["SAGEMAKER_REGION"] = str(region)
    if environment.pytorch_container:
        env.update(pytorch_container_env(environment))
    path_entries = [str(environment.code_dir)]
    for compat in (compat_dir(), horovod_compat_dir()):
        if compat is not None:
            path_entries.append(str(compat))
    if environment.environ.get("PYTHONPATH"):
        path_entries.append(environment.environ["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(path_entries)
    return env


_RANK_COMPAT = Path(__file__).resolve().parents[1] / "rank" / "compat"
"""Where the shims live: :mod:`smlaunch.rank.compat` (loaded into the ranks, so under ``rank/``)."""


def compat_dir() -> Path | None:
    """``smlaunch/rank/compat`` when the real ``smdistributed`` is absent (and the shims exist), else None.

    Looks for the package without importing anything, so it costs a directory scan, not an import.
    """
    return _shim_root("smdistributed", _RANK_COMPAT)


def horovod_compat_dir() -> Path | None:
    """``smlaunch/rank/compat/horovod_shim`` (the ``horovod`` shim's root) when the real ``horovod`` is
    absent, else None. A root of its own, so that a machine with the real smdistributed but no
    Horovod still gets the shim, and one with the real Horovod never sees it."""
    return _shim_root("horovod", _RANK_COMPAT / "horovod_shim")


def _shim_root(package: str, here: Path) -> Path | None:
    """``here`` when it holds a shim of ``package`` and no real ``package`` is importable."""
    import importlib.util

    if not (here / package).is_dir():
        return None
    try:
        found = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        found = None
    if found is not None and found.origin is not None and here not in Path(found.origin).parents:
        return None
    if found is not None and found.submodule_search_locations is not None:
        if any(here not in Path(p).parents for p in found.submodule_search_locations):
            return None
    return here


def program_argv(environment: Environment, python: str) -> list[str]:
    """What each process of the job runs: the entry point and the hyperparameters' argv (toolkit
    ``to_cmd_args``), or for a ModelTrainer job what SDK v3's drivers run
    (:func:`smlaunch.runtime.v3.program_argv`)."""
    if environment.v3 is not None:
        from smlaunch.runtime import v3

        return v3.program_argv(environment, python)
    from smlaunch.runtime.code import entry_point_command

    return (
        entry_point_command(environment.code_dir, environment.user_entry_point, python)
        + environment.user_args()
    )
