"""The contract between a training job and the hosts it runs on, and the code every process shares.

**This package is the ground floor.** The notebook (:mod:`smlaunch.sdk`), the local agent, the hosts
(:mod:`smlaunch.runtime`) and the ranks (:mod:`smlaunch.rank`) all import it; it imports nothing else
of smlaunch (``tests/unit/test_layering.py`` checks both rules). None of it imports torch.

This module owns the names, and only the names: environment variables, hyperparameter keys, file
and directory names under ``/opt/ml``, and the few constants SageMaker fixes (master port, group
name, reserved keys). The SDK writes them (the request and, for local runs, the ``/opt/ml`` trees)
and the runtime reads them: one definition, so a key can never be spelled two ways. It must stay
free of I/O and of imports beyond the standard library.

Its submodules: :mod:`.archive` (safe tarballs), :mod:`.transfer` (S3 and file transfers),
:mod:`.progress`, :mod:`.channels` (which objects reach which host), :mod:`.faults` (the
``SMLAUNCH_FAULTS`` specification), :mod:`.errors` (:class:`~smlaunch.contract.errors.FieldError`),
:mod:`.processes` (ports, exit codes, die-with-parent), :mod:`.mpi_slurm` (how ``mpirun`` on Slurm
asks the Slurm executor for each host's ``orted``), :mod:`.artifact_tree` (which files the user's
code wrote are delivered), :mod:`.hyperparameters` (the toolkit's reading of wire hyperparameters),
:mod:`.framework_env` (the rank variables frameworks read), :mod:`.strategy` (the distribution
strategies, one vocabulary for the SDK, the backends and the launchers) and :mod:`.mounts`
(mount-namespace primitives).

Sources: SageMaker's training toolkit (``params.py``, ``environment.py``) and the SDK v2 wire format;
``docs/runtime-contract.md`` and ``docs/wire-format.md`` document every name.
"""

from __future__ import annotations

import re
from pathlib import Path

# --- /opt/ml layout -----------------------------------------------------------------------------

DEFAULT_BASE_DIR = "/opt/ml"
BASE_DIR_ENV = "SAGEMAKER_BASE_DIR"


class Paths:
    """The /opt/ml tree below one base directory. Pure path arithmetic; creates nothing."""

    def __init__(self, base_dir: str | Path = DEFAULT_BASE_DIR) -> None:
        self.base = Path(base_dir)

    @property
    def code_dir(self) -> Path:
        return self.base / "code"

    @property
    def model_dir(self) -> Path:
        return self.base / "model"

    @property
    def input_dir(self) -> Path:
        return self.base / "input"

    @property
    def input_config_dir(self) -> Path:
        return self.input_dir / "config"

    @property
    def input_data_dir(self) -> Path:
        return self.input_dir / "data"

    @property
    def output_dir(self) -> Path:
        return self.base / "output"

    @property
    def output_data_dir(self) -> Path:
        return self.output_dir / "data"

    @property
    def output_intermediate_dir(self) -> Path:
        return self.output_dir / "intermediate"

    @property
    def checkpoints_dir(self) -> Path:
        return self.base / "checkpoints"

    @property
    def success_file(self) -> Path:
        return self.output_dir / SUCCESS_FILE

    @property
    def failure_file(self) -> Path:
        return self.output_dir / FAILURE_FILE

    @property
    def hyperparameters_file(self) -> Path:
        return self.input_config_dir / HYPERPARAMETERS_FILE

    @property
    def resource_config_file(self) -> Path:
        return self.input_config_dir / RESOURCE_CONFIG_FILE

    @property
    def input_data_config_file(self) -> Path:
        return self.input_config_dir / INPUT_DATA_CONFIG_FILE

    @property
    def checkpoint_config_file(self) -> Path:
        return self.input_config_dir / CHECKPOINT_CONFIG_FILE

    @property
    def tensorboard_config_file(self) -> Path:
        return self.input_config_dir / TENSORBOARD_CONFIG_FILE

    @property
    def tensorboard_dir(self) -> Path:
        """``/opt/ml/output/tensorboard``: TensorBoardOutputConfig's default ``LocalPath``."""
        return self.output_dir / "tensorboard"

    def channel_dir(self, channel: str) -> Path:
        return child_path(self.input_data_dir, channel, "channel name", single=True)

    def pipe_path(self, channel: str, epoch: int) -> Path:
        """Pipe mode FIFO for one epoch of a channel: ``input/data/<channel>_<epoch>``."""
        return child_path(self.input_data_dir, f"{channel}_{epoch}", "channel name", single=True)

    def directories(self) -> list[Path]:
        """Directories the platform creates before the container starts."""
        return [
            self.code_dir,
            self.model_dir,
            self.input_config_dir,
            self.input_data_dir,
            self.output_data_dir,
            self.output_intermediate_dir,
            self.checkpoints_dir,
        ]


class PathEscapeError(ValueError):
    """A name from a request, a config file or a bucket would make a path outside its parent."""


def child_path(parent: str | Path, name: str, what: str, *, single: bool = False) -> Path:
    """``parent / name``, refused (:class:`PathEscapeError` naming ``what`` and ``name``) unless it
    stays strictly below ``parent``: no absolute name, no ``..`` component, nothing that
    normalises to ``parent`` itself. ``single``: ``name`` is one path component (a channel, job or
    host name), so it may not hold a ``/`` either. Lexical only: no I/O."""
    parts = str(name).split("/")
    if (
        not name
        or "\0" in name
        or name.startswith("/")
        or ".." in parts
        or all(part in ("", ".") for part in parts)
        or (single and (len(parts) > 1 or name == "."))
    ):
        raise PathEscapeError(f"{what} {name!r} does not name a path inside {parent}")
    return Path(parent) / name


# sagemaker-training 5.1.4's rule for ``sagemaker_program`` (``process.validate_entry_point``), which
# the containers apply before running anything: a plain relative path of letters, digits and
# ``. _ + - /``, not starting with ``-`` (an interpreter option) or ``/``, without ``.``/``..``
# segments. Matched whole here: the toolkit's ``$`` also lets a trailing newline through.
ENTRY_POINT_PATTERN = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._+-]*(/[A-Za-z0-9._+-]+)*")
_ENTRY_POINT_CHARACTER = re.compile(r"[A-Za-z0-9._+/-]")


def entry_point_problem(name: str) -> str | None:
    """Why SageMaker's training toolkit would refuse ``name`` as the entry point (its wording),
    or None when it accepts it."""
    if not name:
        return "the entry point name is empty"
    if not ENTRY_POINT_PATTERN.fullmatch(name):
        unsupported = sorted({char for char in name if not _ENTRY_POINT_CHARACTER.fullmatch(char)})
        if unsupported:
            detail = "the character(s) " + ", ".join(repr(char) for char in unsupported)
        elif name.startswith("-"):
            detail = "a leading '-', which is read as a command-line option"
        elif name.startswith("/"):
            detail = "a leading '/', which makes it an absolute path"
        else:
            detail = "an unsupported character at the start of the name"
        return f"contains {detail}; SageMaker's training containers refuse it"
    if any(segment in (".", "..") for segment in name.split("/")):
        return "contains '.' or '..' path segments; SageMaker's training containers refuse them"
    return None


ENTRY_POINT_FIX = (
    "rename the script so its path holds only letters, digits, '.', '_', '+', '-' and '/', does "
    "not start with '-' or '/' and has no '.' or '..' segments, e.g. 'train.py' or 'bin/train.sh'"
)

HYPERPARAMETERS_FILE = "hyperparameters.json"
RESOURCE_CONFIG_FILE = "resourceconfig.json"
INPUT_DATA_CONFIG_FILE = "inputdataconfig.json"
CHECKPOINT_CONFIG_FILE = "checkpointconfig.json"
# {"LocalPath", "S3OutputPath"} when TensorBoardOutputConfig is set (smdebug reads LocalPath from it).
TENSORBOARD_CONFIG_FILE = "tensorboardoutputconfig.json"
DEFAULT_TENSORBOARD_LOCAL_PATH = "/opt/ml/output/tensorboard"
DEFAULT_CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
"""``CheckpointConfig.LocalPath`` when the request leaves it unset (SageMaker's default)."""
SUCCESS_FILE = "success"
FAILURE_FILE = "failure"
# Machine-readable companion of the failure file, written by the runtime: {"host", "rank",
# "exit_code", "time", "reason"}. Lets the local backend name the first failure across hosts.
FAILURE_DETAILS_FILE = "failure.json"
# The launch plan a host runtime resolved (LaunchPlan.record(): launcher, summary, topology, every
# command): a local job's describe() shows each host's under "HostTopology".
TOPOLOGY_FILE = "topology.json"

SOURCEDIR_TARBALL = "sourcedir.tar.gz"
MODEL_TARBALL = "model.tar.gz"
OUTPUT_TARBALL = "output.tar.gz"
IGNORE_FILE = ".smlaunchignore"
REQUIREMENTS_FILE = "requirements.txt"
CA_REPOSITORY_ARN_ENV = "CA_REPOSITORY_ARN"
"""The toolkit's variable naming a CodeArtifact repository that pip installs requirements from."""

# FailureReason is the first 1024 characters of the failure file.
FAILURE_REASON_MAX_CHARS = 1024

# --- resourceconfig.json ------------------------------------------------------------------------

DEFAULT_GROUP_NAME = "homogeneousCluster"
DEFAULT_NETWORK_INTERFACE = "eth0"
LOCAL_INSTANCE_TYPE = "local"
LOCAL_GPU_INSTANCE_TYPE = "local_gpu"
MASTER_PORT = 7777


def host_name(index: int) -> str:
    """Host names are ``algo-1..N`` (1-based), as the service names them."""
    return f"algo-{index + 1}"


# --- hyperparameter keys (SDK v2 wire) ----------------------------------------------------------

HP_PROGRAM = "sagemaker_program"
HP_SUBMIT_DIRECTORY = "sagemaker_submit_directory"
HP_LOG_LEVEL = "sagemaker_container_log_level"
HP_JOB_NAME = "sagemaker_job_name"
HP_REGION = "sagemaker_region"
HP_ENABLE_CLOUDWATCH_METRICS = "sagemaker_enable_cloudwatch_metrics"
HP_S3_OUTPUT = "sagemaker_s3_output"

HP_MPI_ENABLED = "sagemaker_mpi_enabled"
HP_MPI_PROCESSES_PER_HOST = "sagemaker_mpi_num_of_processes_per_host"
HP_MPI_CUSTOM_OPTIONS = "sagemaker_mpi_custom_mpi_options"
HP_MPI_NUM_PROCESSES = "sagemaker_mpi_num_processes"
HP_MP_PARAMETERS = "mp_parameters"
HP_SMDDP_ENABLED = "sagemaker_distributed_dataparallel_enabled"
HP_SMDDP_CUSTOM_MPI_OPTIONS = "sagemaker_distributed_dataparallel_custom_mpi_options"
HP_INSTANCE_TYPE = "sagemaker_instance_type"
HP_TORCH_DISTRIBUTED_ENABLED = "sagemaker_torch_distributed_enabled"
HP_PYTORCH_DDP_ENABLED = "sagemaker_pytorch_ddp_enabled"
HP_PARAMETER_SERVER_ENABLED = "sagemaker_parameter_server_enabled"
HP_PYTORCH_XLA_ENABLED = "sagemaker_pytorch_xla_multi_worker_enabled"
HP_MWMS_ENABLED = "sagemaker_multi_worker_mirrored_strategy_enabled"
HP_DISTRIBUTION_INSTANCE_GROUPS = "sagemaker_distribution_instance_groups"

SCRIPT_MODE_KEYS = (HP_SUBMIT_DIRECTORY, HP_PROGRAM, HP_LOG_LEVEL, HP_JOB_NAME, HP_REGION)

# Stripped from the script's argv and from SM_HPS / SM_FRAMEWORK_PARAMS alike
# (toolkit params.SAGEMAKER_HYPERPARAMETERS).
RESERVED_HYPERPARAMETERS = frozenset(
    {
        HP_PROGRAM,
        HP_SUBMIT_DIRECTORY,
        HP_ENABLE_CLOUDWATCH_METRICS,
        HP_REGION,
        HP_LOG_LEVEL,
        HP_JOB_NAME,
        HP_S3_OUTPUT,
        "default_user_module_name",
        "_tuning_objective_metric",
    }
)
FRAMEWORK_PARAM_PREFIX = "sagemaker_"

# Flags that put the current group into distribution_instance_groups (toolkit environment.py).
DISTRIBUTION_ENABLED_FLAGS = (
    HP_MPI_ENABLED,
    HP_PARAMETER_SERVER_ENABLED,
    HP_SMDDP_ENABLED,
    HP_PYTORCH_DDP_ENABLED,
    HP_PYTORCH_XLA_ENABLED,
    HP_MWMS_ENABLED,
    HP_TORCH_DISTRIBUTED_ENABLED,
)

DEFAULT_LOG_LEVEL = 20

# CreateTrainingJob limits on HyperParameters.
MAX_HYPERPARAMETERS = 100
MAX_HYPERPARAMETER_KEY_CHARS = 256
MAX_HYPERPARAMETER_VALUE_CHARS = 2500

# --- environment variables ----------------------------------------------------------------------

SM_PREFIX = "SM_"

# Set by the platform.
TRAINING_JOB_NAME_ENV = "TRAINING_JOB_NAME"
PROGRAM_ENV = "SAGEMAKER_PROGRAM"
TRAINING_MODULE_ENV = "SAGEMAKER_TRAINING_MODULE"
# What the framework images set it to (``ENV SAGEMAKER_TRAINING_MODULE`` in the Deep Learning
# Containers' Dockerfiles): the toolkit then runs that framework's ``training.main``.
PYTORCH_TRAINING_MODULE = "sagemaker_pytorch_container.training:main"
TENSORFLOW_TRAINING_MODULE = "sagemaker_tensorflow_container.training:main"

# SDK v3 extras we also provide.
SM_MASTER_ADDR = "SM_MASTER_ADDR"
SM_MASTER_PORT = "SM_MASTER_PORT"
SM_HOST_COUNT = "SM_HOST_COUNT"
SM_CURRENT_HOST_RANK = "SM_CURRENT_HOST_RANK"

# What torch (and Lightning, Accelerate) read.
RANK = "RANK"
LOCAL_RANK = "LOCAL_RANK"
WORLD_SIZE = "WORLD_SIZE"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT_ENV = "MASTER_PORT"
NODE_RANK = "NODE_RANK"
GROUP_RANK = "GROUP_RANK"
ROLE_RANK = "ROLE_RANK"
ROLE_WORLD_SIZE = "ROLE_WORLD_SIZE"
TF_CONFIG = "TF_CONFIG"

# smlaunch's own variables, read by the runtime. Local emulation needs them because host names
# (algo-1..N) do not resolve on a laptop and several jobs may share one machine.
#   SMLAUNCH_HOST_ADDRESSES  JSON object host -> address, e.g. {"algo-1": "127.0.0.1", ...}
#   SMLAUNCH_MASTER_PORT     port for the rendezvous of ranked launchers (default MASTER_PORT)
#   SMLAUNCH_NUM_GPUS        GPUs this host has (emulated instance types on a CPU machine)
#   SMLAUNCH_NUM_CPUS        CPUs this host reports as SM_NUM_CPUS
#   SMLAUNCH_EMULATE_CUDA    JSON {"gpus": N, "model": "V100", "memory_gib": 16}: every rank emulates
#                            N CUDA devices on the CPU (see smlaunch.rank.cuda_emulation)
#   SMLAUNCH_PROCESSES_PER_HOST  ranks per host for one-rank-per-GPU launchers (torchrun, smddp)
#                            when emulating an instance type whose GPUs this machine lacks
#   SMLAUNCH_FAULTS          JSON list of faults to inject in a local run (see smlaunch.contract.faults)
#   SMLAUNCH_STOP_GRACE_SECONDS  seconds between SIGTERM and SIGKILL when the job is stopped
#   SMLAUNCH_LOG_PREFIX      "0" turns off the [host/rank N] prefix of rank output
#   SMLAUNCH_VERBOSE         "1": each host logs its whole launch topology and where its code came
#                            from; default: one line per host (LocalSession(verbose=True) sets it)
#   SMLAUNCH_STALL_TIMEOUT_SECONDS  seconds without output (and no exit) after which a host's job is
#                            declared hung: stacks dumped, job ended (see
# smlaunch.runtime.supervision.watchdog); unset/0 = off
#   SMLAUNCH_MPI_WAIT_SECONDS  bound on every MPI wait between hosts (workers' sshd, the master's
#                            start, emulated hosts' environments); default 600
#   SMLAUNCH_MPI_DIR         private directory the emulated hosts of one local MPI job share (the local
#                            agent's mkdtemp inside the job directory; required); see
# smlaunch.runtime.launchers.mpi.launcher
#   SMLAUNCH_MPI_SLURM       "1", set by the Slurm executor: MPI ranks start through Slurm, not ssh
#                            (each host's orted is a step the job's agent starts on request in
#                            SMLAUNCH_MPI_DIR); see smlaunch.runtime.launchers.mpi.launcher,
# smlaunch.contract.mpi_slurm
#   SMLAUNCH_STACK_DUMPER    "auto" (py-spy when installed, else faulthandler), "py-spy", "faulthandler"
#   SMLAUNCH_SSHD_CONFIG     sshd_config an MPI worker's sshd uses (``sshd -D -f <path>``); the Docker
#                            and Kubernetes executors set it (per-job keys, one sshd port per host)
#   SMLAUNCH_SSH_PORTS       JSON object host -> sshd port the MPI master probes (default 22)
#   SMLAUNCH_SSH_CONFIG      ssh client config the MPI master's ssh reads (``ssh -F <path>``: mpirun's
#                            remote agent, the end-of-job marker); set by the Kubernetes executor
#   SMLAUNCH_INSTALL_REQUIREMENTS  "0": requirements.txt is not installed (see smlaunch.runtime.requirements)
#   SMLAUNCH_REQUIREMENTS_CACHE  directory of layered environments for requirements.txt; unset: pip
#                            installs into the runtime's own interpreter, as the toolkit does
#   SMLAUNCH_ARCHIVE_MAX_BYTES    bound on the expanded size of the code archive (default 20 GiB)
#   SMLAUNCH_ARCHIVE_MAX_MEMBERS  bound on its number of members (default 1,000,000); see
# smlaunch.contract.archive
#   SMLAUNCH_UNSAFE_CHECKPOINT_LOAD  "1": smp checkpoints load with full pickle (runs code in them);
#                            default: torch.load(weights_only=True), see smlaunch.rank.smp.checkpoint
#   SMLAUNCH_HASH_CACHE      file of the transfer engine's persistent content-hash cache (default
#                            $XDG_CACHE_HOME or ~/.cache, smlaunch/transfer-hashes.sqlite); "" or "0": off
SMLAUNCH_HOST_ADDRESSES = "SMLAUNCH_HOST_ADDRESSES"
SMLAUNCH_MASTER_PORT = "SMLAUNCH_MASTER_PORT"
SMLAUNCH_NUM_GPUS = "SMLAUNCH_NUM_GPUS"
SMLAUNCH_NUM_CPUS = "SMLAUNCH_NUM_CPUS"
SMLAUNCH_EMULATE_CUDA = "SMLAUNCH_EMULATE_CUDA"
SMLAUNCH_PROCESSES_PER_HOST = "SMLAUNCH_PROCESSES_PER_HOST"
SMLAUNCH_FAULTS = "SMLAUNCH_FAULTS"
SMLAUNCH_STOP_GRACE_SECONDS = "SMLAUNCH_STOP_GRACE_SECONDS"
SMLAUNCH_LOG_PREFIX = "SMLAUNCH_LOG_PREFIX"
SMLAUNCH_VERBOSE = "SMLAUNCH_VERBOSE"
SMLAUNCH_STALL_TIMEOUT_SECONDS = "SMLAUNCH_STALL_TIMEOUT_SECONDS"
SMLAUNCH_STACK_DUMPER = "SMLAUNCH_STACK_DUMPER"
SMLAUNCH_MPI_WAIT_SECONDS = "SMLAUNCH_MPI_WAIT_SECONDS"
SMLAUNCH_MPI_DIR = "SMLAUNCH_MPI_DIR"
SMLAUNCH_MPI_SLURM = "SMLAUNCH_MPI_SLURM"
SMLAUNCH_MPI_RANK_MAP = "SMLAUNCH_MPI_RANK_MAP"
SMLAUNCH_SSHD_CONFIG = "SMLAUNCH_SSHD_CONFIG"
SMLAUNCH_SSH_PORTS = "SMLAUNCH_SSH_PORTS"
SMLAUNCH_SSH_CONFIG = "SMLAUNCH_SSH_CONFIG"
SMLAUNCH_INSTALL_REQUIREMENTS = "SMLAUNCH_INSTALL_REQUIREMENTS"
SMLAUNCH_REQUIREMENTS_CACHE = "SMLAUNCH_REQUIREMENTS_CACHE"
SMLAUNCH_ARCHIVE_MAX_BYTES = "SMLAUNCH_ARCHIVE_MAX_BYTES"
SMLAUNCH_ARCHIVE_MAX_MEMBERS = "SMLAUNCH_ARCHIVE_MAX_MEMBERS"
SMLAUNCH_UNSAFE_CHECKPOINT_LOAD = "SMLAUNCH_UNSAFE_CHECKPOINT_LOAD"
SMLAUNCH_HASH_CACHE = "SMLAUNCH_HASH_CACHE"
DEFAULT_MPI_WAIT_SECONDS = 600.0

DEFAULT_STOP_GRACE_SECONDS = 120.0

# --- status names (DescribeTrainingJob) ---------------------------------------------------------

STATUS_IN_PROGRESS = "InProgress"
STATUS_COMPLETED = "Completed"
STATUS_FAILED = "Failed"
STATUS_STOPPING = "Stopping"
STATUS_STOPPED = "Stopped"
TERMINAL_STATUSES = frozenset({STATUS_COMPLETED, STATUS_FAILED, STATUS_STOPPED})

SECONDARY_STARTING = "Starting"
SECONDARY_DOWNLOADING = "Downloading"
SECONDARY_TRAINING = "Training"
SECONDARY_UPLOADING = "Uploading"
SECONDARY_COMPLETED = "Completed"
SECONDARY_FAILED = "Failed"
SECONDARY_STOPPING = "Stopping"
SECONDARY_STOPPED = "Stopped"
SECONDARY_MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"
SECONDARY_INTERRUPTED = "Interrupted"
SECONDARY_MAX_WAIT_TIME_EXCEEDED = "MaxWaitTimeExceeded"
