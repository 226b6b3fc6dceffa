"""The host's training environment: what ``/opt/ml`` and the process environment say, resolved once.

:meth:`Environment.from_files` reads the three config files below a base directory and an explicit
environment mapping; nothing happens at import time and nothing is written (unlike the toolkit, which
freezes paths and creates directories on import). The result is a frozen value that launchers plan
from and that :func:`smlaunch.runtime.env_vars.to_env_vars` renders as the ``SM_*`` variables, with
the exact formats of SageMaker's training toolkit
(``sagemaker_training.environment.Environment.to_env_vars``), checked by
``tests/unit/test_environment_oracle.py``.

Rules, where the toolkit leaves a choice (``docs/runtime-contract.md``):

- Distribution hosts: the hosts of the distribution instance groups in ``instance_groups`` order
  (not sorted); ``hosts`` when the file has no ``instance_groups`` (SDK local mode).
- Master: the first distribution host (else the first host); host rank: the index of this host in
  the distribution hosts (else in ``hosts``). The same rule gives ``NODE_RANK``.
- ``SM_HOST_COUNT`` is ``len(hosts)`` (all hosts, as SDK v3 defines it).
- Addresses: host names resolve on SageMaker and in Docker networks, not on a laptop. When
  ``SMLAUNCH_HOST_ADDRESSES`` (JSON host -> address) is set, ``MASTER_ADDR`` / ``SM_MASTER_ADDR``
  carry the mapped address (``127.0.0.1`` locally) while ``SM_HOSTS``, ``SM_CURRENT_HOST`` and
  ``master_hostname`` keep the names, so scripts see SageMaker's names and torch gets an address it
  can reach. Without the map the address is the host name itself (the platform's DNS resolves it),
  except in a one-host job, where it is ``127.0.0.1``.
- Master port: ``SMLAUNCH_MASTER_PORT`` (a free port per local job) else 7777, as SageMaker's
  PyTorch toolkit uses.
- ``SM_NUM_GPUS``: ``SMLAUNCH_NUM_GPUS`` when set (emulated instance types: the instance type's
  GPUs when ``SMLAUNCH_EMULATE_CUDA`` emulates them on the CPU, else 0), else the count of
  ``GPU `` lines of ``nvidia-smi --list-gpus`` (0 when it is missing or fails). torch is never
  imported here: the runtime must start the user's script within a second.
- ``SM_NUM_CPUS``: ``SMLAUNCH_NUM_CPUS`` when set (the local backend pins emulated hosts), else
  ``os.cpu_count()``.

Rendering the environment into variables (``SM_*``, ``SM_TRAINING_ENV``, the ranks' process
environment) is :mod:`smlaunch.runtime.env_vars`, which reads this value: the dependency runs one way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from smlaunch import contract
from smlaunch.contract import hyperparameters as hp
from smlaunch.contract.errors import HostConfigurationError

if TYPE_CHECKING:
    from smlaunch.runtime.v3_job import V3Job


def _channel_dirs(paths: contract.Paths, channels: Mapping[str, Any]) -> dict[str, str]:
    """``input/data/<channel>`` of every channel; a name that is not one directory name (``..``,
    ``a/b``) is refused, so no channel's data can land outside ``input/data``."""
    dirs: dict[str, str] = {}
    for channel in channels:
        try:
            dirs[channel] = str(paths.channel_dir(channel))
        except contract.PathEscapeError:
            raise HostConfigurationError(
                str(paths.input_data_config_file),
                channel,
                "a channel name must be one directory name (letters, digits, '.', '-', '_'; not '.' or '..')",
                "rename the channel in the request's InputDataConfig",
            ) from None
    return dirs


def _read_json(path: Path, default: Any | None, fix: str) -> Any:
    if not path.exists():
        if default is not None:
            return default
        raise HostConfigurationError(str(path), None, "file is missing", fix)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise HostConfigurationError(str(path), None, f"cannot be read as JSON ({error})", fix) from error


def _count_gpus() -> int:
    """GPUs as the toolkit counts them: ``GPU `` lines of ``nvidia-smi --list-gpus``; 0 on error."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        output = subprocess.run(
            ["nvidia-smi", "--list-gpus"], capture_output=True, text=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in output.split("\n") if line.startswith("GPU "))


def _int_env(environ: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise HostConfigurationError(
            name, raw, f"must be an integer >= {minimum}", f"set {name} to {minimum} or more"
        )
    return value


@dataclass(frozen=True)
class Environment:
    """One host's resolved training environment. Build it with :meth:`from_files`."""

    base_dir: Path
    paths: contract.Paths
    environ: dict[str, str]
    """The process environment the runtime was started with (ranks inherit it)."""
    resource_config: dict[str, Any]
    input_data_config: dict[str, Any]
    all_hyperparameters: dict[str, Any]
    """Every hyperparameter, decoded (user, framework and reserved keys)."""
    hyperparameters: dict[str, Any]
    """The user's hyperparameters, decoded: what argv, ``SM_HPS`` and ``SM_HP_*`` carry."""
    framework_params: dict[str, Any]
    """Non-reserved ``sagemaker_*`` hyperparameters, decoded (``SM_FRAMEWORK_PARAMS``)."""
    sagemaker_hyperparameters: dict[str, Any]
    current_host: str
    hosts: list[str]
    current_instance_type: str
    current_group_name: str
    current_instance_group_hosts: list[str]
    instance_groups: list[str]
    """Group names in file order (toolkit ``instance_groups``)."""
    instance_groups_dict: dict[str, dict[str, Any]]
    network_interface_name: str
    topology: list[Any]
    channel_input_dirs: dict[str, str]
    num_gpus: int
    num_cpus: int
    num_neurons: int
    user_entry_point: str | None
    module_dir: str
    """``sagemaker_submit_directory`` (an S3 URI on SageMaker) else the code dir, as the toolkit
    reports it. Where the code actually is: :attr:`code_dir`."""
    job_name: str | None
    """``TRAINING_JOB_NAME`` (set by the platform), as the toolkit reports it."""
    log_level: Any
    framework_module: str | None
    distribution_instance_groups: list[str]
    distribution_hosts: list[str]
    master_hostname: str
    host_addresses: dict[str, str] = field(default_factory=dict)
    master_port: int = contract.MASTER_PORT
    processes_per_host: int = 1
    """Ranks this host starts for a ranked launcher: ``sagemaker_mpi_num_of_processes_per_host``
    for MPI-based launchers, else ``SMLAUNCH_PROCESSES_PER_HOST``, else the GPU count (then Neuron
    cores), else 1."""
    is_modelparallel_enabled: bool | None = None
    v3: V3Job | None = None
    """A ModelTrainer (SDK v3) job's drivers channel: it gets v3's contract (:mod:`smlaunch.runtime.v3`)."""

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def from_files(cls, base_dir: str | Path, environ: Mapping[str, str]) -> Environment:
        """Read ``<base_dir>/input/config/*.json`` and ``environ``. Raises HostConfigurationError."""
        environ = dict(environ)
        paths = contract.Paths(base_dir)
        resource_config = _read_json(
            paths.resource_config_file,
            None,
            "the platform (or smlaunch's local backend) writes it before the runtime starts",
        )
        raw_hps = _read_json(
            paths.hyperparameters_file, {}, 'write a JSON object of strings, e.g. {"epochs": "3"}'
        )
        input_data_config = _read_json(
            paths.input_data_config_file, {}, "write a JSON object keyed by channel name"
        )
        for name, value, kind in (
            (paths.resource_config_file, resource_config, dict),
            (paths.hyperparameters_file, raw_hps, dict),
            (paths.input_data_config_file, input_data_config, dict),
        ):
            if not isinstance(value, kind):
                raise HostConfigurationError(
                    str(name), value, "must hold a JSON object", "rewrite the file as a JSON object"
                )

        hosts = resource_config.get("hosts")
        current_host = resource_config.get("current_host")
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
            raise HostConfigurationError(
                "resourceconfig.json hosts",
                hosts,
                "must be a non-empty list of host names",
                'e.g. ["algo-1", "algo-2"]',
            )
        for host in hosts:  # host names become file names (logs, stacks, the MPI rendezvous)
            try:
                contract.child_path(paths.base, host, "host name", single=True)
            except contract.PathEscapeError:
                raise HostConfigurationError(
                    "resourceconfig.json hosts",
                    host,
                    "a host name must be one file name (no '/', not '..')",
                    'name hosts like SageMaker does: "algo-1", "algo-2", ...',
                ) from None
        if current_host not in hosts:
            raise HostConfigurationError(
                "resourceconfig.json current_host",
                current_host,
                f"is not one of hosts {hosts}",
                "name this host in hosts",
            )

        decoded = hp.decode(raw_hps)
        user, framework, sagemaker = hp.split(decoded)

        current_instance_type = resource_config.get("current_instance_type", contract.LOCAL_INSTANCE_TYPE)
        current_group = resource_config.get("current_group_name", contract.DEFAULT_GROUP_NAME)
        groups_config = resource_config.get("instance_groups") or []
        instance_groups = [g["instance_group_name"] for g in groups_config]
        instance_groups_dict = {g["instance_group_name"]: g for g in groups_config}
        current_group_hosts: list[str] = []
        for group in groups_config:
            if group["instance_group_name"] == current_group:
                current_group_hosts = list(group["hosts"])
                break

        if contract.HP_DISTRIBUTION_INSTANCE_GROUPS in framework:
            distribution_groups = list(framework[contract.HP_DISTRIBUTION_INSTANCE_GROUPS])
        elif any(hp.truthy(framework.get(flag, False)) for flag in contract.DISTRIBUTION_ENABLED_FLAGS):
            distribution_groups = [current_group]
        else:
            distribution_groups = []
        if groups_config:
            distribution_hosts = [
                h
                for g in groups_config
                if g["instance_group_name"] in distribution_groups
                for h in g["hosts"]
            ]
        else:
            distribution_hosts = list(hosts)
        master_hostname = distribution_hosts[0] if distribution_hosts else hosts[0]

        host_addresses = cls._host_addresses(environ, hosts)
        master_port = _int_env(environ, contract.SMLAUNCH_MASTER_PORT, 1) or contract.MASTER_PORT
        if master_port > 65535:
            raise HostConfigurationError(
                contract.SMLAUNCH_MASTER_PORT, master_port, "is not a TCP port", "use 1..65535"
            )

        num_gpus = _int_env(environ, contract.SMLAUNCH_NUM_GPUS, 0)
        if num_gpus is None:
            num_gpus = _count_gpus()
        num_cpus = _int_env(environ, contract.SMLAUNCH_NUM_CPUS, 1) or (os.cpu_count() or 1)
        # Neuron cores: the toolkit asks neuron-ls; only trn2.48xlarge is known without it.
        num_neurons = 64 if "trn2.48xlarge" in str(current_instance_type) else 0

        processes_per_host = cls._processes_per_host(framework, environ, num_gpus, num_neurons)

        user_entry_point = environ.get(contract.PROGRAM_ENV) or sagemaker.get(contract.HP_PROGRAM)
        module_dir = str(sagemaker.get(contract.HP_SUBMIT_DIRECTORY, str(paths.code_dir)))
        log_level = sagemaker.get(contract.HP_LOG_LEVEL, contract.DEFAULT_LOG_LEVEL)

        mp_parameters = user.get(contract.HP_MP_PARAMETERS)
        is_mp: bool | None = None
        if contract.HP_MP_PARAMETERS in user:
            is_mp = hp.env_value(mp_parameters) not in ("", "{}")

        env = cls(
            base_dir=Path(base_dir),
            paths=paths,
            environ=environ,
            resource_config=resource_config,
            input_data_config=input_data_config,
            all_hyperparameters=decoded,
            hyperparameters=user,
            framework_params=framework,
            sagemaker_hyperparameters=sagemaker,
            current_host=current_host,
            hosts=list(hosts),
            current_instance_type=current_instance_type,
            current_group_name=current_group,
            current_instance_group_hosts=current_group_hosts,
            instance_groups=instance_groups,
            instance_groups_dict=instance_groups_dict,
            network_interface_name=resource_config.get(
                "network_interface_name", contract.DEFAULT_NETWORK_INTERFACE
            ),
            topology=resource_config.get("topology", []),
            channel_input_dirs=_channel_dirs(paths, input_data_config),
            num_gpus=num_gpus,
            num_cpus=num_cpus,
            num_neurons=num_neurons,
            user_entry_point=user_entry_point,
            module_dir=module_dir,
            job_name=environ.get(contract.TRAINING_JOB_NAME_ENV),
            log_level=log_level,
            framework_module=environ.get(contract.TRAINING_MODULE_ENV),
            distribution_instance_groups=distribution_groups,
            distribution_hosts=distribution_hosts,
            master_hostname=master_hostname,
            host_addresses=host_addresses,
            master_port=master_port,
            processes_per_host=processes_per_host,
            is_modelparallel_enabled=is_mp,
        )
        from smlaunch.runtime import v3_job

        job = v3_job.detect(paths, raw_hps)
        env = env if job is None else v3_job.apply(env, job)
        return env

    @staticmethod
    def _host_addresses(environ: Mapping[str, str], hosts: list[str]) -> dict[str, str]:
        raw = environ.get(contract.SMLAUNCH_HOST_ADDRESSES)
        if not raw:
            return {}
        try:
            mapping = json.loads(raw)
        except ValueError:
            mapping = None
        if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
            raise HostConfigurationError(
                contract.SMLAUNCH_HOST_ADDRESSES,
                raw,
                "must be a JSON object host -> address",
                'e.g. {"algo-1": "127.0.0.1", "algo-2": "127.0.0.1"}',
            )
        missing = [h for h in hosts if h not in mapping]
        if missing:
            raise HostConfigurationError(
                contract.SMLAUNCH_HOST_ADDRESSES,
                raw,
                f"has no address for {missing}",
                "map every host of the job",
            )
        return {str(k): str(v) for k, v in mapping.items()}

    @staticmethod
    def _processes_per_host(
        framework: Mapping[str, Any], environ: Mapping[str, str], num_gpus: int, num_neurons: int
    ) -> int:
        if hp.truthy(framework.get(contract.HP_MPI_ENABLED, False)) and framework.get(
            contract.HP_MPI_PROCESSES_PER_HOST
        ):
            value = framework[contract.HP_MPI_PROCESSES_PER_HOST]
            try:
                count = int(value)
            except (TypeError, ValueError):
                count = 0
            if count < 1:
                raise HostConfigurationError(
                    contract.HP_MPI_PROCESSES_PER_HOST,
                    value,
                    "must be an integer >= 1",
                    "set distribution['mpi']['processes_per_host'] to 1 or more",
                )
            return count
        # Emulated hosts are told what their job's settings decided at submit; SageMaker's hosts
        # are not, and count as the toolkit does (GPUs, then Neuron cores).
        pinned = _int_env(environ, contract.SMLAUNCH_PROCESSES_PER_HOST, 1)
        if pinned is not None:
            return pinned
        return num_gpus or num_neurons or 1

    # --- derived values ------------------------------------------------------------------------

    @property
    def code_dir(self) -> Path:
        """Where the user's code is extracted and where ranks start (a ModelTrainer job's: its
        ``code`` channel)."""
        return self.v3.code_dir if self.v3 is not None else self.paths.code_dir

    @property
    def model_dir(self) -> str:
        return str(self.paths.model_dir)

    @property
    def module_name(self) -> str:
        """The entry point minus ``.py``; ``"None"`` without one, as the toolkit reports it."""
        name = str(self.user_entry_point)
        return name[:-3] if name.endswith(".py") else name

    @property
    def is_hetero(self) -> bool:
        return len(self.instance_groups) > 1

    @property
    def is_master(self) -> bool:
        return self.current_host == self.master_hostname

    @property
    def distribution_enabled(self) -> bool:
        """This host's group runs the distributed launcher (else a plain process)."""
        return self.current_group_name in self.distribution_instance_groups

    @property
    def host_rank(self) -> int:
        """Index of this host among the distribution hosts (else among all hosts): NODE_RANK."""
        if self.current_host in self.distribution_hosts:
            return self.distribution_hosts.index(self.current_host)
        return self.hosts.index(self.current_host)

    @property
    def cuda_emulated(self) -> bool:
        """This host's GPUs are emulated on the CPU (``SMLAUNCH_EMULATE_CUDA``;
        smlaunch.rank.cuda_emulation)."""
        return bool(self.environ.get(contract.SMLAUNCH_EMULATE_CUDA))

    @property
    def pytorch_container(self) -> bool:
        """The job runs on SageMaker's PyTorch image: ``SAGEMAKER_TRAINING_MODULE`` is its toolkit's
        (the image sets it; the local backend sets it from the job's image URI)."""
        return str(self.framework_module or "").startswith("sagemaker_pytorch_container.")

    @property
    def host_count(self) -> int:
        return len(self.hosts)

    @property
    def master_addr(self) -> str:
        """Address of the master host that ranks rendezvous at (see module docstring)."""
        return self.address_of(self.master_hostname)

    @property
    def run_id(self) -> str:
        """A job identifier for rendezvous ids and logs: the job name, else ``smlaunch``."""
        return self.job_name or str(self.sagemaker_hyperparameters.get(contract.HP_JOB_NAME) or "smlaunch")

    def address_of(self, host: str) -> str:
        """The address ``host`` is reached at: mapped by ``SMLAUNCH_HOST_ADDRESSES``; else loopback
        in a one-host job (the name may not resolve outside SageMaker); else the name itself."""
        if host not in self.hosts:
            raise HostConfigurationError("host", host, f"is not one of hosts {self.hosts}")
        if host in self.host_addresses:
            return self.host_addresses[host]
        if len(self.hosts) == 1:
            return "127.0.0.1"
        return host

    def user_args(self) -> list[str]:
        """The script's arguments from the user's hyperparameters (toolkit ``to_cmd_args``)."""
        return hp.to_cmd_args(self.hyperparameters)
