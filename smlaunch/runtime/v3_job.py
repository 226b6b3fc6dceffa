"""A ModelTrainer (SDK v3) job's drivers channel, read on the host, and what it changes in the host's
:class:`~smlaunch.runtime.environment.Environment` (:func:`apply`); rendering its variables and
commands is :mod:`smlaunch.runtime.v3`. Apart from it so that ``environment`` imports only this."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from smlaunch import contract
from smlaunch.contract import v3 as v3_contract
from smlaunch.contract.errors import HostConfigurationError


@dataclass(frozen=True)
class V3Job:
    """What the drivers channel says of a ModelTrainer job."""

    source_code: dict[str, Any]
    """``sourcecode.json``: ``SourceCode``'s fields."""
    distributed: dict[str, Any]
    """``distributed.json``: ``Torchrun``'s or ``MPI``'s fields; empty without ``distributed``."""
    raw_hyperparameters: dict[str, str]
    """``hyperparameters.json`` as written (v3 decodes each value with ``safe_deserialize``)."""
    code_dir: Path
    """Where the script starts: the ``code`` channel (else the host's code dir, for a command)."""

    @property
    def command(self) -> str | None:
        """``SourceCode.command`` with its quoted ``args``, as v3 builds it; None without one."""
        command = self.source_code.get("command")
        if not command:
            return None
        import shlex

        parts = str(command).split()
        parts += [shlex.quote(str(arg)) for arg in self.source_code.get("args") or []]
        return " ".join(parts)

    @property
    def is_mpi(self) -> bool:
        return "mpi_additional_options" in self.distributed

    @property
    def is_torchrun(self) -> bool:
        return bool(self.distributed) and not self.is_mpi


def _read(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text() or "{}") or {}
    except (OSError, ValueError) as error:
        raise HostConfigurationError(
            str(path), None, f"cannot be read as JSON ({error})", "let the SDK write the drivers channel"
        ) from error
    if not isinstance(value, dict):
        raise HostConfigurationError(str(path), value, "must hold a JSON object", "rewrite it as one")
    return value


def detect(paths: contract.Paths, raw_hyperparameters: dict[str, str]) -> V3Job | None:
    """The ModelTrainer job of the tree at ``paths``, or None for an estimator's job."""
    drivers = paths.input_data_dir / v3_contract.DRIVERS_CHANNEL
    if not (drivers / v3_contract.SOURCE_CODE_JSON).is_file():
        return None
    code = paths.input_data_dir / v3_contract.CODE_CHANNEL
    return V3Job(
        source_code=_read(drivers / v3_contract.SOURCE_CODE_JSON),
        distributed=_read(drivers / v3_contract.DISTRIBUTED_JSON),
        raw_hyperparameters=dict(raw_hyperparameters),
        code_dir=code if code.is_dir() else paths.code_dir,
    )


def apply(env: Any, job: V3Job) -> Any:
    """``env`` for a ModelTrainer job: every hyperparameter is the user's, decoded as v3 decodes them,
    and the distribution is the wire flags of the launcher that runs it (none for a command)."""
    hyperparameters = {k: v3_contract.safe_deserialize(v) for k, v in job.raw_hyperparameters.items()}
    framework: dict[str, Any] = {}
    configured = job.distributed.get("process_count_per_node")
    if job.command is None and job.is_mpi:
        framework = {contract.HP_MPI_ENABLED: True}
        if configured:
            framework[contract.HP_MPI_PROCESSES_PER_HOST] = int(configured)
        options = job.distributed.get("mpi_additional_options") or []
        if options:
            framework[contract.HP_MPI_CUSTOM_OPTIONS] = " ".join(str(o) for o in options)
    elif job.command is None and job.is_torchrun:
        framework = {contract.HP_TORCH_DISTRIBUTED_ENABLED: True}
    groups = [env.current_group_name] if framework else []
    processes = env.processes_per_host
    if framework and configured:
        processes = int(configured)
    return replace(
        env,
        v3=job,
        hyperparameters=hyperparameters,
        framework_params=framework,
        distribution_instance_groups=groups,
        distribution_hosts=sorted(env.hosts),
        master_hostname=sorted(env.hosts)[0],
        user_entry_point=job.source_code.get("entry_script") or None,
        processes_per_host=processes,
        is_modelparallel_enabled=None,
    )
