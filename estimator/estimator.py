"""``Estimator``, ``Framework`` and ``PyTorch``: SageMaker SDK v2's constructor and ``fit()``, on any
backend (``TensorFlow``, the other ``Framework``, is in :mod:`estimator.tensorflow`).

``fit()`` reads as TorchX's submit: validate (at construction) -> :meth:`Estimator.plan` (pure: the
exact :class:`~estimator.spec.TrainingJobSpec`) -> ``backend.check(spec)`` -> stage code (and local
inputs) -> ``backend.submit(spec)`` -> :class:`~estimator.job.TrainingJob` -> wait. Every bad
argument is a :class:`ConfigurationError` naming the argument, the value and the fix, raised at
construction (or, for ``inputs`` and ``job_name``, in ``plan()``), before anything is staged.

The request equals what ``sagemaker.pytorch.PyTorch(...).fit(...)`` (SDK 2.257.x) sends for the same
arguments (``tests/unit/test_plan_oracle.py`` checks it field by field), apart from these
deliberate differences (distribution ones are in :mod:`estimator.distribution`):

| topic                            | SDK v2                      | smlaunch                                |
|----------------------------------|-----------------------------|-----------------------------------------|
| ``pytorchddp``                   | rewritten to smddp keys     | ``sagemaker_pytorch_ddp_enabled``       |
| entry point / image / mp checks  | at ``fit()``                | at construction                         |
| type unknown to smlaunch         | sent to the service         | sent with a warning; local runs refuse  |
| malformed instance type          | sent to the service         | error naming the nearest types          |
| Trainium type, no ``image_uri``  | pytorch-training-neuron 1.11| error asking for a Neuron ``image_uri`` |
| ``ml.`` type + LocalSession      | not emulated                | allowed: the topology is emulated       |
| local spot, checkpoints          | refused                     | left to ``backend.check(spec)``         |
| local_gpu multi-host             | refused                     | left to ``backend.check(spec)``         |
| torch_distributed, CPU, local    | refused                     | allowed (gloo)                          |
| Debug/ProfilerConfig, local      | sent                        | left out (nothing reads them)           |
| code of local runs               | S3 unless ``local_code``    | ``<output_path>/<job>/source/``         |
| smddp/torch_distributed versions | DLC lists always            | DLC lists on SageMaker only             |
| image, region w/o registry       | error                       | ``pytorch-training:<tag>``              |
| local input path, no scheme      | error                       | ``file://`` (local), uploaded (Session) |
| job-name milliseconds            | 1 to 3 digits               | always 3 digits                         |
| ``attach()``                     | loses distribution, metrics | restores both                           |
| ``attach()`` waiting             | blocks until the job ends   | only with ``wait=True``                 |
| ``set_hyperparameters``          | encodes values twice        | encodes once                            |

``tensorboard_output_config`` is sent to SageMaker as given and emulated locally (event files synced
to its ``s3_output_path`` while the job runs, see :mod:`estimator.backends.local.checkpoints`).

Not supported: ``model_uri``, ``rules``, debugger/profiler config objects, ``instance_groups``,
``training_recipe``, ``git_config``, pipeline variables.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote, urlparse

from estimator import catalog, image_uris, naming
from estimator import hyperparameters as hp
from estimator import inputs as channel_inputs
from estimator.debugger import TensorBoardOutputConfig
from estimator.distribution import DISTRIBUTION_KEYS, Distribution
from estimator.errors import (
    ConfigurationError,
    JobNameTakenError,
    UnsupportedFeatureError,
    no_space_errors,
    require_type,
)
from estimator.job import TrainingJob
from estimator.packaging import build_and_stage, check_readable_dir
from estimator.spec import (
    AlgorithmSpecification,
    Channel,
    CheckpointConfig,
    DebugHookConfig,
    ExperimentConfig,
    MetricDefinition,
    OutputDataConfig,
    ProfilerConfig,
    ResourceConfig,
    RetryStrategy,
    StoppingCondition,
    Tag,
    TrainingJobSpec,
    VpcConfig,
)
from estimator.spec import TensorBoardOutputConfig as TensorBoardOutputSpec
from runtime import contract

logger = logging.getLogger(__name__)

INPUT_MODES = ("File", "FastFile", "Pipe")
CODE_CHANNEL = "code"
CODE_CHANNEL_SOURCEDIR_PATH = "/opt/ml/input/data/code/sourcedir.tar.gz"
# fw_utils.DEBUGGER_UNSUPPORTED_REGIONS / PROFILER_UNSUPPORTED_REGIONS (identical lists in 2.257.7).
DEBUGGER_UNSUPPORTED_REGIONS = frozenset({
    "us-iso-east-1", "us-isob-east-1", "ap-southeast-3", "ap-southeast-4", "eu-south-2",
    "me-central-1", "ap-south-2", "eu-central-2", "us-gov-east-1",
})
# fw_utils.SM_DATAPARALLEL_SUPPORTED_FRAMEWORK_VERSIONS["pytorch"] and
# TORCH_DISTRIBUTED_GPU_SUPPORTED_FRAMEWORK_VERSIONS (SDK 2.257.7): what the DLCs can run.
SMDDP_FRAMEWORK_VERSIONS = (
    "1.6", "1.6.0", "1.7", "1.7.1", "1.8", "1.8.0", "1.8.1", "1.9", "1.9.0", "1.9.1", "1.10", "1.10.0",
    "1.10.2", "1.11", "1.11.0", "1.12", "1.12.0", "1.12.1", "1.13.1", "2.0.0", "2.0.1", "2.1.0", "2.1.2",
    "2.2.0",
)
TORCH_DISTRIBUTED_FRAMEWORK_VERSIONS = (
    "1.13.1", "2.0.0", "2.0.1", "2.1.0", "2.1.2", "2.2.0", "2.3.0", "2.3.1", "2.4.1", "2.5.1", "2.6.0",
    "2.7.1", "2.8.0",
)
MAX_JOB_NAME_ATTEMPTS = 100
"""Generated names ``fit()`` tries (one per millisecond) while other submitters hold them."""
DEFAULT_INSTANCES_PER_TRAINING_JOB = 20
"""SageMaker's default quota "Number of instances per training job" (AWS General Reference, "Amazon
SageMaker endpoints and quotas"; adjustable through Service Quotas). There is no public table of
per-instance-type limits: the per-type quotas ("<type> for training job usage") are set per account,
often 0 on new accounts, so this documented per-job default is the one limit checked, for every type."""
# botocore ResourceConfig.KeepAlivePeriodInSeconds (max) and ExperimentEntityName (pattern, 1..120).
MAX_KEEP_ALIVE_SECONDS = 21600
_EXPERIMENT_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,119}$")
_DLC_TAG = re.compile(
    r"^(?:.+/)?(?P<repository>[a-z]+-training):(?P<version>[0-9.]+)-(?:cpu|gpu)-(?P<py>py[0-9]+)"
)


def _experiment_config(config: Any) -> ExperimentConfig | None:
    """``fit(experiment_config=...)`` as the request's ``ExperimentConfig`` (``None`` when empty, as
    the SDK leaves it out), every name checked against the API's pattern."""
    if config is None or (isinstance(config, Mapping) and not config):
        return None
    fix = "pass e.g. {'ExperimentName': 'my-experiment', 'TrialName': 'my-trial'}"
    if not isinstance(config, Mapping):
        raise ConfigurationError("experiment_config", config, "must be a dict", fix)
    unknown = sorted(set(config) - set(ExperimentConfig.model_fields))
    if unknown:
        raise ConfigurationError(f"experiment_config[{unknown[0]!r}]", config[unknown[0]], "unknown key",
                                 f"use only {', '.join(ExperimentConfig.model_fields)}")
    for key, value in config.items():
        if value is not None and (not isinstance(value, str) or not _EXPERIMENT_NAME.match(value)):
            raise ConfigurationError(
                f"experiment_config[{key!r}]", value,
                "must be 1 to 120 letters, digits or hyphens, starting with a letter or digit", fix)
    return ExperimentConfig(**config)


def _is_uri(value: str) -> bool:
    return urlparse(value).scheme in ("s3", "file")


def _join_uri(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def _default_session(instance_type: str) -> Any:
    if instance_type in (contract.LOCAL_INSTANCE_TYPE, contract.LOCAL_GPU_INSTANCE_TYPE):
        from estimator.session import LocalSession

        return LocalSession()
    try:
        from estimator.session import Session  # type: ignore[attr-defined]
    except ImportError as exc:  # pragma: no cover - only while Session is not installed
        raise ConfigurationError(
            "sagemaker_session", None, "the SageMaker Session is not available in this installation",
            "pass sagemaker_session=LocalSession() to run on this machine",
        ) from exc
    return Session()


_TEXT = (str, type(None))
_FLAG = (bool, type(None))
_PATHS = (list, tuple, type(None))
_ARGUMENT_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "image_uri": (_TEXT, "pass the image URI as a string, e.g. '<registry>/<repository>:<tag>'"),
    "role": (_TEXT, "pass the IAM role's ARN or name as a string"),
    "source_dir": ((str, os.PathLike, type(None)), "pass the code directory's path, e.g. 'src'"),
    "dependencies": (_PATHS, "pass a list of paths, e.g. ['lib/']"),
    "hyperparameters": ((Mapping, type(None)), "pass a dict such as {'epochs': 10}"),
    "volume_kms_key": (_TEXT, "pass a KMS key ID or ARN as a string"),
    "output_kms_key": (_TEXT, "pass a KMS key ID or ARN as a string"),
    "input_mode": ((str,), f"pass one of {list(INPUT_MODES)}"),
    "checkpoint_local_path": (_TEXT, "pass an absolute path such as '/opt/ml/checkpoints'"),
    "use_spot_instances": ((bool,), "pass True or False"),
    "subnets": (_PATHS, "pass a list of subnet IDs, e.g. ['subnet-0abc']"),
    "security_group_ids": (_PATHS, "pass a list of security group IDs, e.g. ['sg-0abc']"),
    "enable_network_isolation": ((bool,), "pass True or False"),
    "encrypt_inter_container_traffic": ((bool,), "pass True or False"),
    "disable_output_compression": ((bool,), "pass True or False"),
    "disable_profiler": ((bool,), "pass True or False"),
    "enable_sagemaker_metrics": (_FLAG, "pass True, False or None"),
    "debugger_hook_config": (_FLAG, "pass False to turn the debugger hook off, or leave it unset"),
}
"""Constructor arguments checked by type alone (the others have checks of their own)."""
_LIST_ITEM_TYPES: dict[str, tuple[type, ...]] = {
    "dependencies": (str, os.PathLike), "subnets": (str,), "security_group_ids": (str,),
}


def _check_argument_types(**arguments: Any) -> None:
    """Every argument of :data:`_ARGUMENT_TYPES` (and each item of the list ones) has its type, or
    :class:`ConfigurationError` names it: a wrong type fails at construction, never as a
    ``TypeError`` deep in ``fit()`` (and ``use_spot_instances="no"`` is not silently True)."""
    for name, value in arguments.items():
        expected, fix = _ARGUMENT_TYPES[name]
        require_type(name, value, expected, fix)
        if name in _LIST_ITEM_TYPES and value is not None:
            for index, item in enumerate(value):
                require_type(f"{name}[{index}]", item, _LIST_ITEM_TYPES[name], fix)


def _check_instance_quota(count: int, instance_type: str, session: Any) -> int:
    """``count`` when SageMaker's quota on instances per training job allows it (see
    :data:`DEFAULT_INSTANCES_PER_TRAINING_JOB`; a session's ``instance_count_quota`` overrides it)."""
    quota = getattr(session, "instance_count_quota", None) or DEFAULT_INSTANCES_PER_TRAINING_JOB
    if count > quota:
        raise ConfigurationError(
            "instance_count", count,
            f"SageMaker's quota allows {quota} instances per training job, whatever the instance type "
            f"({instance_type} here)",
            f"use instance_count <= {quota}, or raise the 'Number of instances per training job' quota "
            "(Service Quotas) and pass instance_count_quota=<your quota> to the session",
        )
    return count


class Estimator:
    """A training job definition: SageMaker SDK v2's ``Estimator`` (generic, ``image_uri``).

    With ``entry_point`` (and ``source_dir``), the code is packed into ``sourcedir.tar.gz`` and the
    script-mode hyperparameters are sent, as for framework estimators. Without it, the image runs
    its own entry point.
    """

    _framework: ClassVar[str | None] = None

    def __init__(
        self,
        image_uri: str | None = None,
        role: str | None = None,
        instance_count: int | None = None,
        instance_type: str | None = None,
        *,
        entry_point: str | None = None,
        source_dir: str | None = None,
        dependencies: list[str] | None = None,
        hyperparameters: Mapping[str, Any] | None = None,
        distribution: Mapping[str, Any] | None = None,
        output_path: str | None = None,
        code_location: str | None = None,
        base_job_name: str | None = None,
        max_run: int = 24 * 60 * 60,
        environment: Mapping[str, str] | None = None,
        volume_size: int = 30,
        volume_kms_key: str | None = None,
        input_mode: str = "File",
        metric_definitions: list[dict[str, str]] | None = None,
        tags: list[dict[str, str]] | Mapping[str, str] | None = None,
        checkpoint_s3_uri: str | None = None,
        checkpoint_local_path: str | None = None,
        use_spot_instances: bool = False,
        max_wait: int | None = None,
        sagemaker_session: Any | None = None,
        subnets: list[str] | None = None,
        security_group_ids: list[str] | None = None,
        enable_network_isolation: bool = False,
        encrypt_inter_container_traffic: bool = False,
        max_retry_attempts: int | None = None,
        disable_output_compression: bool = False,
        output_kms_key: str | None = None,
        container_log_level: int = logging.INFO,
        enable_sagemaker_metrics: bool | None = None,
        disable_profiler: bool = False,
        debugger_hook_config: bool | None = None,
        tensorboard_output_config: TensorBoardOutputConfig | None = None,
        keep_alive_period_in_seconds: int | None = None,
    ) -> None:
        self.instance = catalog.lookup(instance_type, "instance_type")
        self.instance_type: str = self.instance.name
        if isinstance(instance_count, bool) or not isinstance(instance_count, int) or instance_count < 1:
            raise ConfigurationError("instance_count", instance_count, "must be an integer >= 1",
                                     "pass instance_count=1 or more")
        _check_argument_types(
            image_uri=image_uri, role=role, source_dir=source_dir, dependencies=dependencies,
            hyperparameters=hyperparameters, volume_kms_key=volume_kms_key, output_kms_key=output_kms_key,
            input_mode=input_mode, checkpoint_local_path=checkpoint_local_path,
            use_spot_instances=use_spot_instances, subnets=subnets, security_group_ids=security_group_ids,
            enable_network_isolation=enable_network_isolation,
            encrypt_inter_container_traffic=encrypt_inter_container_traffic,
            disable_output_compression=disable_output_compression, disable_profiler=disable_profiler,
            enable_sagemaker_metrics=enable_sagemaker_metrics, debugger_hook_config=debugger_hook_config,
        )
        session = sagemaker_session if sagemaker_session is not None else _default_session(self.instance_type)
        self.instance_count = _check_instance_quota(instance_count, self.instance_type, session)
        self.sagemaker_session = session
        self.is_local = bool(getattr(session, "is_local", False))
        if self.instance.is_local and not self.is_local:
            raise ConfigurationError(
                "instance_type", self.instance_type, "local types run only with a LocalSession",
                "pass sagemaker_session=LocalSession(), or an ml. instance type",
            )
        if self.is_local:
            catalog.require_topology(self.instance, pinned_ranks=getattr(session, "processes_per_host", None))
        elif not self.instance.known:
            logger.warning(
                "instance_type=%r is not in smlaunch's instance catalog (a type newer than it?): sent "
                "to SageMaker as given, without the checks that need its accelerators; suggestions: %s",
                self.instance_type, ", ".join(catalog.suggestions(self.instance_type)) or "none",
            )
        if not self.is_local and not role:
            raise ConfigurationError("role", role, "SageMaker training jobs need an IAM execution role",
                                     "pass role='arn:aws:iam::<account>:role/<name>'")
        self.role = role
        self.image_uri = image_uri
        self.entry_point = entry_point
        self.source_dir = source_dir
        self.dependencies = list(dependencies or [])
        self._check_code()

        self._hyperparameters = dict(hyperparameters or {})
        hp.check_user_keys(self._hyperparameters)
        hp.check_limits(hp.encode(self._hyperparameters))
        self._distribution_arg: dict[str, Any] = {}
        self._distribution_checked: dict[str, Any] = {}
        self._set_distribution(distribution)

        self.output_path = self._check_location(output_path, "output_path")
        self.code_location = self._check_location(code_location, "code_location")
        self.base_job_name = (
            naming.validate_base_job_name(base_job_name) if base_job_name is not None else None
        )
        self.max_run = self._positive_int(max_run, "max_run", "seconds, e.g. 86400")
        self.volume_size = self._positive_int(volume_size, "volume_size", "GB, e.g. 30")
        self.volume_kms_key = volume_kms_key
        if input_mode not in INPUT_MODES:
            raise ConfigurationError("input_mode", input_mode, "not a SageMaker input mode",
                                     f"use one of {list(INPUT_MODES)}")
        self.input_mode = input_mode
        self.environment = self._check_environment(environment)
        self.metric_definitions = self._check_metrics(metric_definitions)
        self.tags = self._check_tags(tags)
        self.use_spot_instances = use_spot_instances
        self.max_wait = self._check_spot(max_wait)
        self.checkpoint_s3_uri, self.checkpoint_local_path = self._check_checkpoints(
            checkpoint_s3_uri, checkpoint_local_path
        )
        if bool(subnets) != bool(security_group_ids):
            raise ConfigurationError(
                "subnets" if not subnets else "security_group_ids", subnets or security_group_ids,
                "a VPC configuration needs both subnets and security_group_ids",
                "pass both subnets=[...] and security_group_ids=[...], or neither",
            )
        self.subnets = list(subnets) if subnets else None
        self.security_group_ids = list(security_group_ids) if security_group_ids else None
        self._enable_network_isolation = enable_network_isolation
        self.encrypt_inter_container_traffic = encrypt_inter_container_traffic
        if max_retry_attempts is not None and (
            isinstance(max_retry_attempts, bool) or not isinstance(max_retry_attempts, int)
            or not 1 <= max_retry_attempts <= 30
        ):
            raise ConfigurationError("max_retry_attempts", max_retry_attempts, "must be an integer 1..30",
                                     "pass e.g. max_retry_attempts=3")
        self.max_retry_attempts = max_retry_attempts
        self.disable_output_compression = disable_output_compression
        self.output_kms_key = output_kms_key
        if isinstance(container_log_level, bool) or not isinstance(container_log_level, int):
            raise ConfigurationError("container_log_level", container_log_level, "must be an int",
                                     "pass a logging level such as logging.INFO (20)")
        self.container_log_level = container_log_level
        self.enable_sagemaker_metrics = enable_sagemaker_metrics
        self.disable_profiler = disable_profiler
        self.debugger_hook_config = debugger_hook_config
        self.tensorboard_output_config = self._check_tensorboard(tensorboard_output_config)
        keep_alive = keep_alive_period_in_seconds
        if keep_alive is not None and (
            isinstance(keep_alive, bool) or not isinstance(keep_alive, int)
            or not 0 <= keep_alive <= MAX_KEEP_ALIVE_SECONDS
        ):
            raise ConfigurationError(
                "keep_alive_period_in_seconds", keep_alive_period_in_seconds,
                f"must be an integer 0..{MAX_KEEP_ALIVE_SECONDS} (seconds a warm pool keeps the instances)",
                "pass e.g. keep_alive_period_in_seconds=1800, or leave it unset",
            )
        self.keep_alive_period_in_seconds = keep_alive_period_in_seconds
        """SageMaker warm pools; sent as ``ResourceConfig.KeepAlivePeriodInSeconds``. Local runs
        accept it and it has no effect there (hosts are processes or containers of this machine)."""
        self.latest_training_job: TrainingJob | None = None

    @property
    def distribution(self) -> dict[str, Any]:
        """The ``distribution`` dict as passed (``{}`` when none), as the SDK keeps it, so code such as
        ``est.distribution["mpi"]`` works; the checked, typed form stays internal. Assigning a new
        dict, or changing this one, is honoured (and checked) by the next ``plan()``/``fit()``."""
        return self._distribution_arg

    @distribution.setter
    def distribution(self, value: Mapping[str, Any] | None) -> None:
        self._set_distribution(value)

    def _set_distribution(self, value: Any) -> None:
        """Parse and check ``value`` against the topology (and the framework image), then keep it."""
        parsed = Distribution.parse(value, self._framework)
        parsed.check(self.instance, self.instance_count, local=self.is_local,
                     emulated_processes_per_host=getattr(self.sagemaker_session, "processes_per_host", None))
        torch_on = parsed.torch_distributed is not None and parsed.torch_distributed.enabled
        if torch_on and self.entry_point is not None and not self.entry_point.endswith(".py"):
            raise ConfigurationError(
                "entry_point", self.entry_point, "torch_distributed runs Python programs (*.py) only",
                "point entry_point at a .py file",
            )
        previous = getattr(self, "_distribution", None)
        self._distribution = parsed
        try:
            self._check_framework_distribution()
        except ConfigurationError:
            if previous is not None:
                self._distribution = previous
            raise
        self._distribution_arg = value if isinstance(value, dict) else parsed.to_dict()
        self._distribution_checked = copy.deepcopy(self._distribution_arg)

    def _check_framework_distribution(self) -> None:
        """Limits the framework's image puts on the distribution (a generic image has none)."""

    def enable_network_isolation(self) -> bool:
        """Whether the job runs without network access (a method, as in the SDK)."""
        return bool(self._enable_network_isolation)

    # --- construction checks ------------------------------------------------------------------

    def _check_code(self) -> None:
        entry_point, source_dir = self.entry_point, self.source_dir
        if entry_point is None:
            if source_dir is not None or self.dependencies:
                raise ConfigurationError("entry_point", None,
                                         "source_dir and dependencies need an entry point",
                                         "pass entry_point='train.py'")
            return
        if not isinstance(entry_point, str) or not entry_point:
            raise ConfigurationError("entry_point", entry_point, "must be the script's file name",
                                     "pass e.g. entry_point='train.py'")
        if source_dir is not None:
            try:  # the script runs from the unpacked source_dir: it must be a file inside it
                contract.child_path(str(source_dir), entry_point, "entry_point")
            except contract.PathEscapeError:
                raise ConfigurationError(
                    "entry_point", entry_point,
                    f"must be a path inside source_dir {str(source_dir)!r} (relative, no '..'): only "
                    "source_dir is packaged and shipped to the hosts",
                    "move the script into source_dir and pass its path relative to it, e.g. 'train.py'",
                ) from None
        if source_dir is not None and _is_uri(str(source_dir)):
            # A pre-built sourcedir.tar.gz (as the SDK accepts for s3://; file:// for local runs).
            if not str(source_dir).endswith(".tar.gz"):
                raise ConfigurationError("source_dir", source_dir, "a source_dir URI must name a .tar.gz",
                                         "pass s3://<bucket>/<key>/sourcedir.tar.gz or a local directory")
            if urlparse(str(source_dir)).scheme == "file" and not self.is_local:
                raise ConfigurationError("source_dir", source_dir, "file:// code works only for local runs",
                                         "pass a local directory (it is uploaded) or an s3:// URI")
            return
        if source_dir is not None:
            directory = check_readable_dir(source_dir, "source_dir")
            if not (directory / entry_point).is_file():
                raise ConfigurationError(
                    "entry_point", entry_point,
                    f"no file named {entry_point!r} in source_dir {str(source_dir)!r}",
                    "pass the script's path relative to source_dir",
                )
            self.source_dir = str(directory.resolve())
        elif not Path(entry_point).is_file():
            raise ConfigurationError("entry_point", entry_point, "no such file",
                                     "pass an existing script, or set source_dir to the folder holding it")
        for index, dependency in enumerate(self.dependencies):
            if not Path(dependency).expanduser().exists():
                raise ConfigurationError(f"dependencies[{index}]", dependency, "no such file or directory",
                                         "pass existing paths")

    def _check_location(self, uri: str | None, field: str) -> str | None:
        if uri is None:
            return None
        if not isinstance(uri, str):
            raise ConfigurationError(field, uri, "must be a URI string", "pass s3://bucket/prefix")
        scheme = urlparse(uri).scheme
        if scheme == "s3":
            return channel_inputs.validate_s3_uri(uri, field)
        if scheme == "file":
            path = channel_inputs.file_uri_path(uri, field)
            if not self.is_local:
                raise ConfigurationError(field, uri, "file:// paths work only for local runs",
                                         "use an s3:// URI, or sagemaker_session=LocalSession()")
            existing = path
            while not existing.exists() and existing != existing.parent:
                existing = existing.parent
            if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
                raise ConfigurationError(field, uri, f"not writable ({existing} cannot be written)",
                                         "pass a directory you can write to")
            return uri
        if scheme == "" and self.is_local:
            path = Path(uri).expanduser().resolve()
            return self._check_location(path.as_uri() + ("/" if uri.endswith("/") else ""), field)
        raise ConfigurationError(field, uri, "must start with s3:// (or file:// for local runs)",
                                 "pass e.g. s3://my-bucket/output")

    @staticmethod
    def _positive_int(value: Any, field: str, unit: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(field, value, "must be an integer >= 1", f"pass a number of {unit}")
        return value

    @staticmethod
    def _check_environment(environment: Mapping[str, str] | None) -> dict[str, str] | None:
        if environment is None:
            return None
        if not isinstance(environment, Mapping):
            raise ConfigurationError("environment", environment, "must be a dict of str -> str",
                                     "pass e.g. {'NCCL_DEBUG': 'INFO'}")
        if len(environment) > 100:
            raise ConfigurationError("environment", f"<{len(environment)} entries>",
                                     "CreateTrainingJob accepts at most 100 variables", "pass fewer")
        for key, value in environment.items():
            if not isinstance(key, str) or not re.match(r"^[a-zA-Z_][a-zA-Z0-9_]{0,511}$", key):
                raise ConfigurationError("environment key", key, "not a valid variable name",
                                         "use letters, digits and '_', not starting with a digit")
            if not isinstance(value, str) or len(value) > 512:
                raise ConfigurationError(f"environment[{key!r}]", value, "must be a string of at most 512 "
                                         "characters", f"pass str(value), e.g. {{{key!r}: '1'}}")
        # Checked here, not when a host starts: a typo fails before staging.
        from runtime.archive import ArchiveLimits
        from runtime.errors import FieldError

        if contract.SMLAUNCH_FAULTS in environment:
            from runtime.faults import parse_faults

            try:
                parse_faults(environment[contract.SMLAUNCH_FAULTS])
            except FieldError as exc:
                raise ConfigurationError(f"environment[{contract.SMLAUNCH_FAULTS!r}]", exc.value, exc.problem,
                                         exc.fix) from None
        try:
            ArchiveLimits.from_environ(environment)
        except FieldError as exc:
            raise ConfigurationError(f"environment[{exc.field!r}]", exc.value, exc.problem, exc.fix) from None
        return dict(environment)

    @staticmethod
    def _check_metrics(metric_definitions: Any) -> list[dict[str, str]] | None:
        if metric_definitions is None:
            return None
        if not isinstance(metric_definitions, list):
            raise ConfigurationError("metric_definitions", metric_definitions, "must be a list",
                                     "pass [{'Name': 'loss', 'Regex': 'loss=([0-9.]+)'}]")
        for index, metric in enumerate(metric_definitions):
            field = f"metric_definitions[{index}]"
            if not isinstance(metric, Mapping) or set(metric) != {"Name", "Regex"}:
                raise ConfigurationError(field, metric, "must be a dict with exactly 'Name' and 'Regex'",
                                         "pass {'Name': 'loss', 'Regex': 'loss=([0-9.]+)'}")
            for key in ("Name", "Regex"):
                require_type(f"{field}.{key}", metric[key], str, "pass a string")
            try:
                re.compile(metric["Regex"])
            except (re.error, TypeError) as exc:
                raise ConfigurationError(f"{field}.Regex", metric["Regex"], f"not a valid regex ({exc})",
                                         "fix the pattern; the first group is the value") from exc
        return [dict(m) for m in metric_definitions]

    @staticmethod
    def _check_tags(tags: Any) -> list[dict[str, str]] | None:
        if tags is None:
            return None
        if isinstance(tags, Mapping):
            tags = [{"Key": k, "Value": v} for k, v in tags.items()]
        if not isinstance(tags, list) or not all(
            isinstance(t, Mapping) and set(t) == {"Key", "Value"}
            and isinstance(t["Key"], str) and isinstance(t["Value"], str) for t in tags
        ):
            raise ConfigurationError("tags", tags, "must be a list of {'Key': str, 'Value': str}",
                                     "pass [{'Key': 'team', 'Value': 'ml'}]")
        return [dict(t) for t in tags]

    def _check_spot(self, max_wait: Any) -> int | None:
        if max_wait is None:
            if self.use_spot_instances and not self.is_local:
                raise ConfigurationError("max_wait", None, "managed spot training needs max_wait",
                                         f"pass max_wait >= max_run ({self.max_run})")
            return None
        max_wait = self._positive_int(max_wait, "max_wait", "seconds")
        if not self.use_spot_instances:
            raise ConfigurationError("max_wait", max_wait, "applies only to spot training",
                                     "pass use_spot_instances=True, or drop max_wait")
        if max_wait < self.max_run:
            raise ConfigurationError("max_wait", max_wait, f"must be >= max_run ({self.max_run})",
                                     f"pass max_wait={self.max_run} or more")
        return max_wait

    def _check_checkpoints(self, s3_uri: str | None, local_path: str | None) -> tuple[str | None, str | None]:
        if local_path is not None and s3_uri is None:
            raise ConfigurationError("checkpoint_local_path", local_path, "needs checkpoint_s3_uri",
                                     "pass checkpoint_s3_uri as well")
        if s3_uri is not None:
            s3_uri = self._check_location(s3_uri, "checkpoint_s3_uri")
        if local_path is not None and not str(local_path).startswith("/"):
            raise ConfigurationError("checkpoint_local_path", local_path, "must be an absolute path",
                                     "pass e.g. /opt/ml/checkpoints")
        return s3_uri, local_path

    def _check_tensorboard(self, config: Any) -> TensorBoardOutputConfig | None:
        """The config with its ``s3_output_path`` checked as an output location (``file://`` and
        local paths only for local runs). Where ``LocalPath`` may point is the backend's check."""
        if config is None:
            return None
        if not isinstance(config, TensorBoardOutputConfig):
            raise ConfigurationError("tensorboard_output_config", config, "must be a TensorBoardOutputConfig",
                                     "pass TensorBoardOutputConfig('s3://my-bucket/my-job/tensorboard')")
        field = "tensorboard_output_config.s3_output_path"
        uri = self._check_location(config.s3_output_path, field) or config.s3_output_path
        return TensorBoardOutputConfig(uri, config.container_local_output_path)

    # --- what subclasses define -----------------------------------------------------------------

    def hyperparameters(self) -> dict[str, Any]:
        """The user's hyperparameters, raw (the SDK returns them JSON-encoded; ``plan()`` shows the
        encoded wire form)."""
        return dict(self._hyperparameters)

    def set_hyperparameters(self, **kwargs: Any) -> None:
        """Add or replace hyperparameters. Unlike SDK v2, values are encoded once, not twice."""
        merged = {**self._hyperparameters, **kwargs}
        hp.check_user_keys(merged)
        hp.check_limits(hp.encode(merged))
        self._hyperparameters = merged

    def _image(self, region: str) -> str | None:
        return self.image_uri

    def _base_name(self) -> str:
        if self.base_job_name:
            return self.base_job_name
        if self.image_uri:
            return naming.base_name_from_image(self.image_uri)
        return "smlaunch"

    def _framework_hyperparameters(self, job_name: str, output_path: str) -> dict[str, Any]:
        """Keys a framework estimator adds after the distribution's (TensorFlow's ``model_dir``)."""
        return {}

    def _metrics_time_series(self) -> bool | None:
        return self.enable_sagemaker_metrics

    # --- plan -----------------------------------------------------------------------------------

    def _job_name(self, job_name: str | None, now: datetime | None = None) -> str:
        if job_name is not None:
            return naming.validate_job_name(job_name)
        return naming.validate_job_name(naming.name_from_base(self._base_name(), now), "base_job_name")

    def _output_path(self) -> str:
        return self.output_path or self.sagemaker_session.default_output_path()

    def _code_uri(self, job_name: str, output_path: str) -> str | None:
        """Where ``sourcedir.tar.gz`` will be staged: code_location, else the output bucket's root
        (as the SDK does), else for ``file://`` output the output path itself."""
        if self.entry_point is None:
            return None
        if self.source_dir is not None and _is_uri(self.source_dir):
            return self.source_dir
        if self.code_location:
            base = self.code_location
        elif urlparse(output_path).scheme == "s3":
            base = f"s3://{urlparse(output_path).netloc}"
        else:
            base = output_path
        return _join_uri(base, job_name, "source", contract.SOURCEDIR_TARBALL)

    def _program(self) -> str:
        assert self.entry_point is not None
        return self.entry_point if self.source_dir is not None else os.path.basename(self.entry_point)

    def _plan(self, inputs: Any, job_name: str | None, now: datetime | None = None,
              experiment_config: Mapping[str, str] | None = None,
              ) -> tuple[TrainingJobSpec, list[tuple[str, str]]]:
        """The spec, and the local input paths to upload as (channel, path) before submitting.
        ``now``: the time a generated job name carries (default: the clock)."""
        if self._distribution_arg != self._distribution_checked:  # the dict was changed in place
            self._set_distribution(self._distribution_arg)
        session = self.sagemaker_session
        name = self._job_name(job_name, now)
        region = str(session.region_name)
        output_path = self._output_path()

        uploads: list[tuple[str, str]] = []
        staged_inputs = self._stage_plan_inputs(inputs, name, output_path, uploads)
        channels = channel_inputs.channels(staged_inputs, local=self.is_local)

        wire = hp.encode(self.hyperparameters())
        code_uri = self._code_uri(name, output_path)
        if code_uri is not None:
            submit_directory = code_uri
            if self._enable_network_isolation:
                # As the SDK: an isolated container cannot read S3, so the code comes in as a channel.
                if any(c.ChannelName == CODE_CHANNEL for c in channels or []):
                    raise ConfigurationError(f"inputs[{CODE_CHANNEL!r}]", CODE_CHANNEL,
                                             "with enable_network_isolation the code uses this channel",
                                             "rename your channel")
                # Not checked for existence: the code is staged there only by fit().
                code_channel = Channel.model_validate(
                    {**channel_inputs.TrainingInput(code_uri).config, "ChannelName": CODE_CHANNEL}
                )
                channels = [*(channels or []), code_channel]
                submit_directory = CODE_CHANNEL_SOURCEDIR_PATH
            wire.update(hp.encode({
                contract.HP_SUBMIT_DIRECTORY: submit_directory,
                contract.HP_PROGRAM: self._program(),
                contract.HP_LOG_LEVEL: self.container_log_level,
                contract.HP_JOB_NAME: name,
                contract.HP_REGION: region,
            }))
        wire.update(hp.encode(self._distribution.to_hyperparameters(self.instance_type), "distribution"))
        wire.update(hp.encode(self._framework_hyperparameters(name, output_path)))
        hp.check_limits(wire)

        algorithm: dict[str, Any] = {"TrainingInputMode": self.input_mode}
        image = self._image(region)
        if image is not None:
            algorithm["TrainingImage"] = image
        if self.metric_definitions:
            algorithm["MetricDefinitions"] = [MetricDefinition(**m) for m in self.metric_definitions]
        if self._metrics_time_series() is not None:
            algorithm["EnableSageMakerMetricsTimeSeries"] = self._metrics_time_series()

        output: dict[str, Any] = {"S3OutputPath": output_path}
        if self.output_kms_key is not None:
            output["KmsKeyId"] = self.output_kms_key
        if self.disable_output_compression:
            output["CompressionType"] = "NONE"

        spec = TrainingJobSpec(
            TrainingJobName=name,
            AlgorithmSpecification=AlgorithmSpecification(**algorithm),
            RoleArn=session.expand_role(self.role),
            OutputDataConfig=OutputDataConfig(**output),
            ResourceConfig=ResourceConfig(
                InstanceType=self.instance_type, InstanceCount=self.instance_count,
                VolumeSizeInGB=self.volume_size, VolumeKmsKeyId=self.volume_kms_key,
                KeepAlivePeriodInSeconds=self.keep_alive_period_in_seconds,
            ),
            StoppingCondition=StoppingCondition(MaxRuntimeInSeconds=self.max_run,
                                                MaxWaitTimeInSeconds=self.max_wait),
            HyperParameters=wire,
            InputDataConfig=channels,
            CheckpointConfig=(
                CheckpointConfig(S3Uri=self.checkpoint_s3_uri, LocalPath=self.checkpoint_local_path)
                if self.checkpoint_s3_uri else None
            ),
            Environment=self.environment or None,
            VpcConfig=(
                VpcConfig(SecurityGroupIds=self.security_group_ids, Subnets=self.subnets)
                if self.subnets and self.security_group_ids else None
            ),
            EnableNetworkIsolation=True if self._enable_network_isolation else None,
            EnableInterContainerTrafficEncryption=True if self.encrypt_inter_container_traffic else None,
            EnableManagedSpotTraining=True if self.use_spot_instances else None,
            RetryStrategy=(
                RetryStrategy(MaximumRetryAttempts=self.max_retry_attempts)
                if self.max_retry_attempts else None
            ),
            Tags=[Tag(**t) for t in self.tags] if self.tags else None,
            DebugHookConfig=self._debug_hook_config(region, output_path),
            ProfilerConfig=self._profiler_config(region, output_path),
            TensorBoardOutputConfig=(
                TensorBoardOutputSpec(**self.tensorboard_output_config._to_request_dict())
                if self.tensorboard_output_config is not None else None
            ),
            ExperimentConfig=_experiment_config(experiment_config),
        )
        return spec, uploads

    def _stage_plan_inputs(self, inputs: Any, job_name: str, output_path: str,
                           uploads: list[tuple[str, str]]) -> Any:
        """For a SageMaker session, scheme-less local paths become the S3 prefix they will be
        uploaded to (``Session.stage_local_input``); recorded in ``uploads``."""
        if self.is_local or not isinstance(inputs, (str, Mapping)):
            return inputs
        mapping = {channel_inputs.DEFAULT_CHANNEL: inputs} if isinstance(inputs, str) else dict(inputs)
        for channel, value in mapping.items():
            if isinstance(value, str) and urlparse(value).scheme == "" and value:
                channel_inputs.validate_channel_name(channel)
                if not hasattr(self.sagemaker_session, "stage_local_input"):
                    continue  # channels() raises the error naming the fix
                if not Path(value).expanduser().exists():
                    raise ConfigurationError(f"inputs[{channel!r}]", value, "no such file or directory",
                                             "pass an existing local path or an s3:// URI")
                bucket_root = self.sagemaker_session.default_output_path()
                mapping[channel] = _join_uri(bucket_root, job_name, "input", channel) + "/"
                uploads.append((channel, str(Path(value).expanduser().resolve())))
        return mapping

    def _debug_hook_config(self, region: str, output_path: str) -> DebugHookConfig | None:
        if self.is_local or region in DEBUGGER_UNSUPPORTED_REGIONS or self.debugger_hook_config is False:
            return None
        # SDK Framework._validate_and_set_debugger_configs: SMDebug cannot follow distributed jobs
        # that checkpoint; for framework estimators (distribution always set) that is every job.
        if self.checkpoint_s3_uri and self.checkpoint_local_path and (
            self._framework is not None or self.instance_count > 1
        ):
            return None
        return DebugHookConfig(S3OutputPath=output_path, CollectionConfigurations=[])

    def _profiler_config(self, region: str, output_path: str) -> ProfilerConfig | None:
        if self.is_local:
            return None
        # fw_utils._instance_type_supports_profiler: despite its name, True turns profiling off (trn*).
        if self.disable_profiler or region in DEBUGGER_UNSUPPORTED_REGIONS or self.instance.is_neuron:
            return ProfilerConfig(DisableProfiler=True)
        return ProfilerConfig(S3OutputPath=output_path, DisableProfiler=False)

    def plan(self, inputs: Any = None, job_name: str | None = None,
             experiment_config: Mapping[str, str] | None = None) -> TrainingJobSpec:
        """The exact request ``fit(inputs)`` would send; stages and submits nothing.

        ``plan(...).to_request()`` is the dict boto3's ``create_training_job`` receives, and
        ``print(plan(...))`` shows it as indented JSON; its fields read as attributes
        (``plan().ResourceConfig.InstanceType``).

        The code URI in ``sagemaker_submit_directory`` is where the code *will* be staged. The only
        I/O is checking that local input paths exist (and, for a SageMaker session without an
        ``output_path``, the session resolving its default bucket).
        """
        return self._plan(inputs, job_name, experiment_config=experiment_config)[0]

    # --- fit and the job handle -----------------------------------------------------------------

    def fit(self, inputs: Any = None, wait: bool = True, logs: bool | str = True,
            job_name: str | None = None, experiment_config: Mapping[str, str] | None = None) -> None:
        """Plan, check with the backend, stage code and inputs, submit; wait when asked.

        ``experiment_config`` (``ExperimentName``, ``TrialName``, ``TrialComponentDisplayName``,
        ``RunName``) is sent as the request's ``ExperimentConfig``, as the SDK sends it; a local job
        records it in its ``describe()``.
        """
        require_type("wait", wait, bool, "pass wait=True or wait=False")
        require_type("logs", logs, (bool, str), "pass logs=True or logs=False")
        backend = self.sagemaker_session.backend()
        spec, uploads = self._claim(backend, inputs, job_name, experiment_config)
        try:
            self._stage_code(spec)
            for channel, path in uploads:
                self.sagemaker_session.stage_local_input(path, spec.TrainingJobName, channel)
            backend.submit(spec)
        except BaseException:
            backend.release(spec)  # the name is free again, and nothing staged for it is left
            raise
        print(f"Creating training-job with name: {spec.TrainingJobName}", flush=True)
        self.latest_training_job = TrainingJob(backend, spec.TrainingJobName)
        if wait:
            show_logs = logs not in (False, "None")
            self.latest_training_job.wait(logs=show_logs)

    def _claim(self, backend: Any, inputs: Any, job_name: str | None,
               experiment_config: Mapping[str, str] | None = None,
               ) -> tuple[TrainingJobSpec, list[tuple[str, str]]]:
        """Plan, check and reserve the job's name before anything is staged (``backend.reserve``).

        A generated name that another submitter holds (same base, same millisecond: concurrent
        ``fit(wait=False)`` calls) is replaced by the next millisecond's, as the SDK's
        ``name_from_base`` gives every call a fresh name; a name the user chose is refused.
        """
        moment = datetime.now(timezone.utc)
        for _ in range(MAX_JOB_NAME_ATTEMPTS):
            spec, uploads = self._plan(inputs, job_name, moment, experiment_config)
            try:
                backend.check(spec)
                backend.reserve(spec)
                return spec, uploads
            except JobNameTakenError:
                if job_name is not None:
                    raise
            moment = max(datetime.now(timezone.utc), moment + timedelta(milliseconds=1))
        raise JobNameTakenError(
            "base_job_name", self._base_name(),
            f"{MAX_JOB_NAME_ATTEMPTS} generated job names in a row were taken",
            "pass job_name=... explicitly, or another base_job_name",
        )

    def _stage_code(self, spec: TrainingJobSpec) -> None:
        if self.entry_point is None or (self.source_dir is not None and _is_uri(self.source_dir)):
            return
        uri = self._code_uri(spec.TrainingJobName, spec.OutputDataConfig.S3OutputPath)
        assert uri is not None
        s3_client = None
        extra_args: dict[str, Any] | None = None
        if urlparse(uri).scheme == "s3":
            s3_client = self.sagemaker_session.s3_client()
            bucket = urlparse(uri).netloc
            extra_args = {"ServerSideEncryption": "aws:kms"}
            output_bucket = urlparse(spec.OutputDataConfig.S3OutputPath).netloc
            if self.output_kms_key and bucket == output_bucket:
                extra_args["SSEKMSKeyId"] = self.output_kms_key
            owner_args = getattr(self.sagemaker_session, "bucket_owner_args", None)
            if owner_args is not None:
                extra_args.update(owner_args(bucket))
        # A full disk (the code's own file:// destination, or the temp dir it is built in) is named.
        where = unquote(urlparse(uri).path) if urlparse(uri).scheme == "file" else tempfile.gettempdir()
        with no_space_errors(where, "free space on that filesystem, or stage the code elsewhere "
                                    "(code_location=..., output_path=..., or LocalSession(root=...))"):
            archive, uploaded = build_and_stage(self.entry_point, self.source_dir, self.dependencies, uri,
                                                s3_client=s3_client, extra_args=extra_args)
        logger.info("%s %s (sha256 %s)", "Staged code to" if uploaded else "Code unchanged at", uri,
                    archive.sha256[:12])

    def _require_job(self) -> TrainingJob:
        if self.latest_training_job is None:
            raise ConfigurationError("latest_training_job", None, "no training job yet",
                                     "call fit() first, or Estimator.attach(job_name)")
        return self.latest_training_job

    @property
    def model_data(self) -> str:
        """``<output_path>/<job>/output/model.tar.gz`` of the latest job."""
        job = self._require_job()
        uri = job.model_data
        if uri:
            return uri
        return _join_uri(self._output_path(), job.name, "output", contract.MODEL_TARBALL)

    @property
    def training_job_analytics(self) -> Any:
        """The latest job's metrics: a :class:`~estimator.analytics.TrainingJobAnalytics`
        (``.dataframe()``, ``.plot()``), from any backend, as the SDK's property of this name."""
        from estimator.analytics import TrainingJobAnalytics

        job = self._require_job()
        return TrainingJobAnalytics(job.name, sagemaker_session=self.sagemaker_session)

    def logs(self) -> None:
        """Print the latest job's logs, following them until it ends."""
        self._require_job().logs(follow=True)

    def stop(self, reason: str | None = None) -> None:
        """Stop the latest job (returns without waiting). ``reason="spot"`` emulates a spot
        interruption of a local managed-spot job instead: it resumes on fresh hosts."""
        self._require_job().stop(reason=reason)

    def deploy(self, *args: Any, **kwargs: Any) -> Any:
        """Not supported: smlaunch trains; it does not host endpoints. Raises
        :class:`UnsupportedFeatureError` saying where the model is and what can serve it."""
        raise UnsupportedFeatureError(
            "deploy() (SageMaker real-time endpoints)",
            "take the trained model from est.model_data (model.tar.gz) and serve it with "
            "sagemaker.pytorch.PyTorchModel(model_data=est.model_data, role=..., entry_point=...)"
            ".deploy(...) "
            "from the SageMaker Python SDK, or with TorchServe on your own machine",
        )

    # --- attach ---------------------------------------------------------------------------------

    @classmethod
    def attach(cls, training_job_name: str, sagemaker_session: Any | None = None,
               wait: bool = False) -> Estimator:
        """Rebuild the estimator of an existing job from DescribeTrainingJob (``distribution`` and
        ``metric_definitions`` included) and point ``latest_training_job`` at it."""
        naming.validate_job_name(training_job_name, "training_job_name")
        if sagemaker_session is None:
            sagemaker_session = _default_session("ml.m5.large")
        backend = sagemaker_session.backend()
        description = backend.describe(training_job_name)
        kwargs = cls._init_params_from_description(description)
        estimator = cls(sagemaker_session=sagemaker_session, **kwargs)
        estimator.latest_training_job = TrainingJob(backend, training_job_name)
        if wait:
            estimator.latest_training_job.wait(logs=False)
        return estimator

    @classmethod
    def _init_params_from_description(cls, desc: Mapping[str, Any]) -> dict[str, Any]:
        algorithm = desc.get("AlgorithmSpecification") or {}
        resources = desc.get("ResourceConfig") or {}
        stopping = desc.get("StoppingCondition") or {}
        output = desc.get("OutputDataConfig") or {}
        kwargs: dict[str, Any] = {
            "role": desc.get("RoleArn"),
            "instance_count": resources.get("InstanceCount"),
            "instance_type": resources.get("InstanceType"),
            "volume_size": resources.get("VolumeSizeInGB", 30),
            "volume_kms_key": resources.get("VolumeKmsKeyId"),
            "keep_alive_period_in_seconds": resources.get("KeepAlivePeriodInSeconds"),
            "max_run": stopping.get("MaxRuntimeInSeconds", 24 * 60 * 60),
            "max_wait": stopping.get("MaxWaitTimeInSeconds"),
            "input_mode": algorithm.get("TrainingInputMode", "File"),
            "output_path": output.get("S3OutputPath"),
            "output_kms_key": output.get("KmsKeyId"),
            "disable_output_compression": output.get("CompressionType") == "NONE",
            "base_job_name": naming.base_from_name(desc["TrainingJobName"]),
            "use_spot_instances": bool(desc.get("EnableManagedSpotTraining")),
            "enable_network_isolation": bool(desc.get("EnableNetworkIsolation")),
            "encrypt_inter_container_traffic": bool(desc.get("EnableInterContainerTrafficEncryption")),
            "environment": desc.get("Environment") or None,
            "metric_definitions": [
                {"Name": m["Name"], "Regex": m["Regex"]} for m in algorithm.get("MetricDefinitions") or []
            ] or None,
            "enable_sagemaker_metrics": algorithm.get("EnableSageMakerMetricsTimeSeries"),
            "image_uri": algorithm.get("TrainingImage"),
        }
        if desc.get("Tags"):
            kwargs["tags"] = [{"Key": t["Key"], "Value": t["Value"]} for t in desc["Tags"]]
        if desc.get("VpcConfig"):
            kwargs["subnets"] = desc["VpcConfig"].get("Subnets")
            kwargs["security_group_ids"] = desc["VpcConfig"].get("SecurityGroupIds")
        if desc.get("RetryStrategy"):
            kwargs["max_retry_attempts"] = desc["RetryStrategy"].get("MaximumRetryAttempts")
        if desc.get("CheckpointConfig"):
            kwargs["checkpoint_s3_uri"] = desc["CheckpointConfig"].get("S3Uri")
            kwargs["checkpoint_local_path"] = desc["CheckpointConfig"].get("LocalPath")
        if desc.get("TensorBoardOutputConfig"):
            tensorboard = desc["TensorBoardOutputConfig"]
            kwargs["tensorboard_output_config"] = TensorBoardOutputConfig(
                tensorboard["S3OutputPath"], tensorboard.get("LocalPath"))

        decoded = hp.decode(desc.get("HyperParameters") or {})
        if contract.HP_PROGRAM in decoded:
            kwargs["entry_point"] = decoded[contract.HP_PROGRAM]
            kwargs["source_dir"] = decoded.get(contract.HP_SUBMIT_DIRECTORY)
        if contract.HP_LOG_LEVEL in decoded:
            kwargs["container_log_level"] = int(decoded[contract.HP_LOG_LEVEL])
        kwargs["distribution"] = Distribution.from_hyperparameters(decoded).to_dict() or None
        script_keys = set(contract.SCRIPT_MODE_KEYS)
        # Every other sagemaker_* key is the platform's (or another SDK's), never the user's.
        kwargs["hyperparameters"] = {
            key: value for key, value in decoded.items()
            if key not in script_keys and key not in DISTRIBUTION_KEYS
            and not key.startswith(contract.FRAMEWORK_PARAM_PREFIX)
        }
        return kwargs


class Framework(Estimator):
    """SageMaker SDK v2's ``sagemaker.estimator.Framework``: script mode on a Deep Learning Container.

    ``framework_version`` and ``py_version`` pick the DLC image (see :mod:`estimator.image_uris`);
    ``image_uri`` overrides it (e.g. an smlaunch image from ``container/`` pushed to ECR).
    Subclasses name the framework, its display name and the version from which the SDK turns
    metrics time series on.
    """

    _display_name: ClassVar[str]
    _metrics_since: ClassVar[tuple[int, ...]]
    _version_example: ClassVar[str]

    def __init__(
        self,
        entry_point: str | None = None,
        framework_version: str | None = None,
        py_version: str | None = None,
        source_dir: str | None = None,
        hyperparameters: Mapping[str, Any] | None = None,
        image_uri: str | None = None,
        distribution: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        catalog.lookup(kwargs.get("instance_type"), "instance_type")  # the first thing to get right
        require_type("framework_version", framework_version, (str, type(None)), "pass e.g. '2.1.0'")
        require_type("py_version", py_version, (str, type(None)), "pass e.g. 'py310'")
        if entry_point is None:
            raise ConfigurationError("entry_point", None, f"{self._display_name} runs a training script",
                                     "pass entry_point='train.py'")
        if image_uri is None and (framework_version is None or py_version is None):
            raise ConfigurationError(
                "framework_version" if framework_version is None else "py_version", None,
                f"framework_version and py_version pick the {self._display_name} image",
                f"pass both (e.g. {self._version_example}) or image_uri",
            )
        if image_uri is None:
            image_uris.version_config(str(framework_version), str(py_version), str(self._framework))
        self.framework_version = framework_version
        self.py_version = py_version
        if "enable_sagemaker_metrics" not in kwargs and framework_version is not None:
            # The SDK turns metrics time series on from a version on (PyTorch 1.3, TensorFlow 1.15).
            kwargs["enable_sagemaker_metrics"] = _version_tuple(framework_version) >= self._metrics_since
            if not kwargs["enable_sagemaker_metrics"]:
                kwargs["enable_sagemaker_metrics"] = None
        super().__init__(image_uri, entry_point=entry_point, source_dir=source_dir,
                         hyperparameters=hyperparameters, distribution=distribution, **kwargs)

    def _image(self, region: str) -> str | None:
        if self.image_uri is not None:
            return self.image_uri
        version, py, framework = str(self.framework_version), str(self.py_version), str(self._framework)
        if self.is_local and not image_uris.has_region(version, py, region, framework):
            # No registry for this region (LocalSession's is "local"): name the image without one,
            # so the request still says which framework build it is (attach reads it back).
            row = image_uris.version_config(version, py, framework)
            return f"{row['repository']}:{version}-{self.instance.processor}-{py}"
        return image_uris.retrieve(version, py, self.instance, region,
                                   smdistributed=self._distribution.smdistributed is not None,
                                   framework=framework)

    def _base_name(self) -> str:
        if self.base_job_name:
            return self.base_job_name
        if self.image_uri:
            return naming.base_name_from_image(self.image_uri)
        row = image_uris.version_config(str(self.framework_version), str(self.py_version),
                                        str(self._framework))
        return str(row["repository"])

    @classmethod
    def _init_params_from_description(cls, desc: Mapping[str, Any]) -> dict[str, Any]:
        kwargs = super()._init_params_from_description(desc)
        image = kwargs.get("image_uri") or ""
        match = _DLC_TAG.match(image)
        if match and match.group("repository") == f"{cls._framework}-training":
            kwargs["framework_version"] = match.group("version")
            kwargs["py_version"] = match.group("py")
            kwargs["image_uri"] = None
        return kwargs


class PyTorch(Framework):
    """SageMaker SDK v2's ``sagemaker.pytorch.PyTorch``: script mode on the PyTorch DLC."""

    _framework = "pytorch"
    _display_name = "PyTorch"
    _metrics_since = (1, 3)
    _version_example = "framework_version='2.1.0', py_version='py310'"

    def _check_framework_distribution(self) -> None:
        """The DLC's own limits (SDK rules 17, 18, 20, 21): only when a DLC runs the job."""
        if self.is_local or self.image_uri is not None:
            return
        version, py = str(self.framework_version), str(self.py_version)
        if self.instance.is_neuron:
            raise ConfigurationError(
                "image_uri", None,
                f"{self.instance_type} runs the Neuron Deep Learning Containers, which smlaunch's "
                "PyTorch image table (CPU and GPU images) does not cover",
                "pass image_uri='763104351884.dkr.ecr.<region>.amazonaws.com/pytorch-training-neuronx:<tag>'",
            )
        dist = self._distribution
        if dist.smddp_enabled:
            if version not in SMDDP_FRAMEWORK_VERSIONS:
                raise ConfigurationError("framework_version", version,
                                         "smdistributed.dataparallel is not in this PyTorch image",
                                         f"use one of {', '.join(SMDDP_FRAMEWORK_VERSIONS)}")
        torch_on = dist.torch_distributed is not None and dist.torch_distributed.enabled
        if torch_on and version not in TORCH_DISTRIBUTED_FRAMEWORK_VERSIONS:
            raise ConfigurationError(
                "framework_version", version,
                f"torch_distributed is not supported by the PyTorch {version} image",
                f"use one of {', '.join(TORCH_DISTRIBUTED_FRAMEWORK_VERSIONS)}",
            )
        if (dist.smddp_enabled or torch_on) and "py3" not in py:
            raise ConfigurationError("py_version", py, "distributed training needs Python 3",
                                     "pass a py3x py_version")
        if torch_on and dist.modelparallel_enabled:
            raise ConfigurationError(
                "distribution", dist.to_dict(),
                "SMP v2 (torch_distributed + smdistributed.modelparallel) needs the "
                "smdistributed-modelparallel image, which smlaunch's image table does not cover",
                "pass image_uri='658645717510.dkr.ecr.<region>.amazonaws.com/"
                "smdistributed-modelparallel:<tag>'",
            )


def _version_tuple(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for part in str(version).split("."):
        digits = re.match(r"\d+", part)
        parts.append(int(digits.group()) if digits else 0)
    return tuple(parts)
