"""A ModelTrainer (SDK v3) job on this host: found by its drivers channel, given v3's contract.

A host whose ``input/data/sm_drivers/sourcecode.json`` exists runs a ModelTrainer job
(:mod:`smlaunch.contract.v3`): its script gets exactly the variables v3's drivers give it (not the
toolkit's), starts in the ``code`` channel, gets ``--key value`` for each hyperparameter, and runs as
v3's drivers run it: ``SourceCode.command`` through ``bash -c`` (one process per host); an entry
script as one process per host; under ``Torchrun``, ``process_count_per_node`` ranks per host with
torchrun's variables; under ``MPI``, through ``mpirun``. The launchers are the toolkit jobs' own: the
job's distribution is given to them as the wire flags an estimator would have sent
(:func:`smlaunch.runtime.v3_job.apply`, with reading the channel), so every launcher, the
supervisor and the report work unchanged.

Deliberate differences from v3's drivers, where a host is emulated: ``SM_MASTER_ADDR`` and
``SM_MASTER_PORT`` are the address and port the job's hosts reach each other at (v3 writes
``algo-1`` and 7777, which is what SageMaker's hosts get here too), and ``SM_NUM_CPUS`` /
``SM_NUM_GPUS`` follow the emulated instance (as for the toolkit's variables).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from smlaunch.contract import v3 as v3_contract
from smlaunch.contract.errors import HostConfigurationError

if TYPE_CHECKING:
    from smlaunch.runtime.environment import Environment


def to_env_vars(env: Environment) -> dict[str, str]:
    """The variables v3's drivers give the script, for this host."""
    assert env.v3 is not None
    return v3_contract.environment(
        str(env.paths.base),
        env.resource_config,
        env.input_data_config,
        env.v3.raw_hyperparameters,
        env.v3.source_code,
        env.v3.distributed,
        job_name=env.job_name or "",
        num_cpus=env.num_cpus,
        num_gpus=env.num_gpus,
        num_neurons=env.num_neurons,
        log_level=env.environ.get("SM_LOG_LEVEL", v3_contract.DEFAULT_LOG_LEVEL),
        master_addr=env.master_addr,
        master_port=env.master_port,
    )


def process_env(env: Environment) -> dict[str, str]:
    """Every process's environment: the runtime's own plus v3's variables (and, under ``Torchrun``,
    what its driver exports: ``NCCL_PROTO=simple``, and the job's interface on SageMaker's network)."""
    assert env.v3 is not None
    variables = {**env.environ, **to_env_vars(env)}
    if env.v3.is_torchrun and env.v3.command is None:
        variables["NCCL_PROTO"] = "simple"
        if not env.host_addresses:
            variables["NCCL_SOCKET_IFNAME"] = env.network_interface_name
    return variables


def program_argv(env: Environment, python: str) -> list[str]:
    """What each process runs: the command through ``bash -c``, else the entry script (``.py`` under
    ``python``, ``.sh`` as v3 runs it) with the hyperparameters as ``--key value``."""
    assert env.v3 is not None
    command = env.v3.command
    if command is not None:
        return ["/bin/bash", "-c", command]
    entry = env.user_entry_point
    if not entry:
        raise HostConfigurationError(
            v3_contract.SOURCE_CODE_JSON,
            env.v3.source_code,
            "names neither an entry_script nor a command",
            "pass SourceCode(entry_script=...) or SourceCode(command=...)",
        )
    try:
        return v3_contract.script_command(entry, env.v3.raw_hyperparameters, python)
    except ValueError:
        raise HostConfigurationError(
            "entry_script", entry, "only .py and .sh scripts are supported", "rename it to end in .py or .sh"
        ) from None
