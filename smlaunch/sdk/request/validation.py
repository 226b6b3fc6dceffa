"""The estimator's argument checks: each names the argument, the value and the fix.

:class:`~smlaunch.sdk.estimator.Estimator` calls them at construction (``experiment_config`` at
``fit()``/``plan()``), so a bad argument fails before anything is planned, staged or started. Pure
functions of their arguments (plus, for paths, the file system they name); they keep nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from smlaunch import contract
from smlaunch.sdk import inputs as channel_inputs
from smlaunch.sdk.debugger import TensorBoardOutputConfig
from smlaunch.sdk.errors import ConfigurationError, require_type
from smlaunch.sdk.jobs.metrics import MetricParser
from smlaunch.sdk.request import naming
from smlaunch.sdk.request.packaging import check_readable_dir
from smlaunch.sdk.request.spec import ExperimentConfig

INPUT_MODES = ("File", "FastFile", "Pipe")
DEFAULT_INSTANCES_PER_TRAINING_JOB = 20
"""SageMaker's default quota "Number of instances per training job" (AWS General Reference, "Amazon
SageMaker endpoints and quotas"; adjustable through Service Quotas). There is no public table of
per-instance-type limits: the per-type quotas ("<type> for training job usage") are set per account,
often 0 on new accounts, so this documented per-job default is the one limit checked, for every type."""
# botocore ResourceConfig.KeepAlivePeriodInSeconds (max) and ExperimentEntityName (pattern, 1..120).
MAX_KEEP_ALIVE_SECONDS = 21600
MAX_ENVIRONMENT_CHARS = 512  # TrainingEnvironmentKey and TrainingEnvironmentValue


def experiment_config(config: Any) -> ExperimentConfig | None:
    """``fit(experiment_config=...)`` as the request's ``ExperimentConfig`` (``None`` when empty, as
    the SDK leaves it out), every name checked against the API's pattern."""
    if config is None or (isinstance(config, Mapping) and not config):
        return None
    fix = "pass e.g. {'ExperimentName': 'my-experiment', 'TrialName': 'my-trial'}"
    if not isinstance(config, Mapping):
        raise ConfigurationError("experiment_config", config, "must be a dict", fix)
    unknown = sorted(set(config) - set(ExperimentConfig.model_fields))
    if unknown:
        raise ConfigurationError(
            f"experiment_config[{unknown[0]!r}]",
            config[unknown[0]],
            "unknown key",
            f"use only {', '.join(ExperimentConfig.model_fields)}",
        )
    for key, value in config.items():
        if value is not None and (
            not isinstance(value, str) or not naming.EXPERIMENT_NAME_PATTERN.fullmatch(value)
        ):
            raise ConfigurationError(
                f"experiment_config[{key!r}]",
                value,
                "must be 1 to 120 letters, digits or hyphens, starting with a letter or digit",
                fix,
            )
    return ExperimentConfig(**config)


def is_uri(value: str) -> bool:
    """Whether ``value`` is an ``s3://`` or ``file://`` URI."""
    return urlparse(value).scheme in ("s3", "file")


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
    "enable_network_isolation": (_FLAG, "pass True or False"),
    "encrypt_inter_container_traffic": (_FLAG, "pass True or False"),
    "disable_output_compression": ((bool,), "pass True or False"),
    "disable_profiler": (_FLAG, "pass True or False"),
    "enable_sagemaker_metrics": (_FLAG, "pass True, False or None"),
    "debugger_hook_config": (_FLAG, "pass False to turn the debugger hook off, or leave it unset"),
}
"""Constructor arguments checked by type alone (the others have checks of their own)."""
_LIST_ITEM_TYPES: dict[str, tuple[type, ...]] = {
    "dependencies": (str, os.PathLike),
    "subnets": (str,),
    "security_group_ids": (str,),
}


def check_argument_types(**arguments: Any) -> None:
    """Every argument of :data:`_ARGUMENT_TYPES` (and each item of the list ones) has its type, or
    :class:`ConfigurationError` names it: a wrong type fails at construction, never as a
    ``TypeError`` deep in ``fit()`` (and ``use_spot_instances="no"`` is not silently True)."""
    for name, value in arguments.items():
        expected, fix = _ARGUMENT_TYPES[name]
        require_type(name, value, expected, fix)
        if name in _LIST_ITEM_TYPES and value is not None:
            for index, item in enumerate(value):
                require_type(f"{name}[{index}]", item, _LIST_ITEM_TYPES[name], fix)


def check_instance_quota(count: int, instance_type: str, quota: int | None) -> int:
    """``count`` when SageMaker's quota on instances per training job allows it (see
    :data:`DEFAULT_INSTANCES_PER_TRAINING_JOB`; a session's ``instance_count_quota`` overrides it)."""
    quota = quota or DEFAULT_INSTANCES_PER_TRAINING_JOB
    if count > quota:
        raise ConfigurationError(
            "instance_count",
            count,
            f"SageMaker's quota allows {quota} instances per training job, whatever the instance type "
            f"({instance_type} here)",
            f"use instance_count <= {quota}, or raise the 'Number of instances per training job' quota "
            "(Service Quotas) and pass instance_count_quota=<your quota> to the session",
        )
    return count


def check_instance_count(instance_count: Any) -> int:
    """An integer >= 1."""
    if isinstance(instance_count, bool) or not isinstance(instance_count, int) or instance_count < 1:
        raise ConfigurationError(
            "instance_count", instance_count, "must be an integer >= 1", "pass instance_count=1 or more"
        )
    return instance_count


def check_input_mode(input_mode: str) -> str:
    """One of :data:`INPUT_MODES`."""
    if input_mode not in INPUT_MODES:
        raise ConfigurationError(
            "input_mode", input_mode, "not a SageMaker input mode", f"use one of {list(INPUT_MODES)}"
        )
    return input_mode


def check_vpc(subnets: list[str] | None, security_group_ids: list[str] | None) -> None:
    """Both of a VPC configuration, or neither."""
    if bool(subnets) != bool(security_group_ids):
        raise ConfigurationError(
            "subnets" if not subnets else "security_group_ids",
            subnets or security_group_ids,
            "a VPC configuration needs both subnets and security_group_ids",
            "pass both subnets=[...] and security_group_ids=[...], or neither",
        )


def check_max_retry_attempts(max_retry_attempts: Any) -> int | None:
    """``RetryStrategy.MaximumRetryAttempts``: an integer 1..30, or None."""
    if max_retry_attempts is not None and (
        isinstance(max_retry_attempts, bool)
        or not isinstance(max_retry_attempts, int)
        or not 1 <= max_retry_attempts <= 30
    ):
        raise ConfigurationError(
            "max_retry_attempts",
            max_retry_attempts,
            "must be an integer 1..30",
            "pass e.g. max_retry_attempts=3",
        )
    return max_retry_attempts


def check_container_log_level(container_log_level: Any) -> int:
    """A ``logging`` level (an int)."""
    if isinstance(container_log_level, bool) or not isinstance(container_log_level, int):
        raise ConfigurationError(
            "container_log_level",
            container_log_level,
            "must be an int",
            "pass a logging level such as logging.INFO (20)",
        )
    return container_log_level


def check_keep_alive(keep_alive: Any) -> int | None:
    """``ResourceConfig.KeepAlivePeriodInSeconds``: 0..:data:`MAX_KEEP_ALIVE_SECONDS`, or None."""
    if keep_alive is not None and (
        isinstance(keep_alive, bool)
        or not isinstance(keep_alive, int)
        or not 0 <= keep_alive <= MAX_KEEP_ALIVE_SECONDS
    ):
        raise ConfigurationError(
            "keep_alive_period_in_seconds",
            keep_alive,
            f"must be an integer 0..{MAX_KEEP_ALIVE_SECONDS} (seconds a warm pool keeps the instances)",
            "pass e.g. keep_alive_period_in_seconds=1800, or leave it unset",
        )
    return keep_alive


def check_code(
    entry_point: Any, source_dir: str | None, dependencies: list[str], is_local: bool
) -> str | None:
    """``entry_point``, ``source_dir`` and ``dependencies`` name code that exists and can be
    packaged (or a pre-built ``sourcedir.tar.gz`` URI); returns ``source_dir`` resolved."""
    if entry_point is None:
        if source_dir is not None or dependencies:
            raise ConfigurationError(
                "entry_point",
                None,
                "source_dir and dependencies need an entry point",
                "pass entry_point='train.py'",
            )
        return source_dir
    if not isinstance(entry_point, str) or not entry_point:
        raise ConfigurationError(
            "entry_point", entry_point, "must be the script's file name", "pass e.g. entry_point='train.py'"
        )
    if source_dir is not None:
        try:  # the script runs from the unpacked source_dir: it must be a file inside it
            contract.child_path(str(source_dir), entry_point, "entry_point")
        except contract.PathEscapeError:
            raise ConfigurationError(
                "entry_point",
                entry_point,
                f"must be a path inside source_dir {str(source_dir)!r} (relative, no '..'): only "
                "source_dir is packaged and shipped to the hosts",
                "move the script into source_dir and pass its path relative to it, e.g. 'train.py'",
            ) from None
    # What the containers run is sagemaker_program: the path inside source_dir, else the file name.
    program = entry_point if source_dir is not None else os.path.basename(entry_point)
    problem = contract.entry_point_problem(program)
    if problem is not None:
        raise ConfigurationError(
            "entry_point",
            entry_point,
            problem if program == entry_point else f"its file name {program!r} {problem}",
            contract.ENTRY_POINT_FIX,
        )
    if source_dir is not None and is_uri(str(source_dir)):
        # A pre-built sourcedir.tar.gz (as the SDK accepts for s3://; file:// for local runs).
        if not str(source_dir).endswith(".tar.gz"):
            raise ConfigurationError(
                "source_dir",
                source_dir,
                "a source_dir URI must name a .tar.gz",
                "pass s3://<bucket>/<key>/sourcedir.tar.gz or a local directory",
            )
        if urlparse(str(source_dir)).scheme == "file" and not is_local:
            raise ConfigurationError(
                "source_dir",
                source_dir,
                "file:// code works only for local runs",
                "pass a local directory (it is uploaded) or an s3:// URI",
            )
        return source_dir
    if source_dir is not None:
        directory = check_readable_dir(source_dir, "source_dir")
        if not (directory / entry_point).is_file():
            raise ConfigurationError(
                "entry_point",
                entry_point,
                f"no file named {entry_point!r} in source_dir {str(source_dir)!r}",
                "pass the script's path relative to source_dir",
            )
        source_dir = str(directory.resolve())
    elif not Path(entry_point).is_file():
        raise ConfigurationError(
            "entry_point",
            entry_point,
            "no such file",
            "pass an existing script, or set source_dir to the folder holding it",
        )
    for index, dependency in enumerate(dependencies):
        if not Path(dependency).expanduser().exists():
            raise ConfigurationError(
                f"dependencies[{index}]", dependency, "no such file or directory", "pass existing paths"
            )
    return source_dir


def check_submit_directory(submit_directory: Any, is_local: bool) -> None:
    """A ``sagemaker_submit_directory`` hyperparameter the user sets (an image run without
    ``entry_point``, as notebooks run the framework images): code the hosts can fetch. SageMaker
    hosts fetch ``s3://`` only; local hosts also an existing ``file://`` URI or path."""
    field = f"hyperparameters[{contract.HP_SUBMIT_DIRECTORY!r}]"
    fix = "pass s3://<bucket>/<prefix>/sourcedir.tar.gz, or entry_point=/source_dir= to stage the code"
    if not isinstance(submit_directory, str) or not submit_directory:
        raise ConfigurationError(field, submit_directory, "must be the code's URI", fix)
    scheme = urlparse(submit_directory).scheme
    if scheme == "s3":
        channel_inputs.validate_s3_uri(submit_directory, field)
        return
    if not is_local:
        raise ConfigurationError(field, submit_directory, "SageMaker hosts fetch code from S3 only", fix)
    if scheme not in ("", "file"):
        raise ConfigurationError(field, submit_directory, f"unsupported scheme {scheme!r}", fix)
    path = channel_inputs.file_uri_path(submit_directory, field) if scheme else Path(submit_directory)
    if not path.is_absolute():  # each host resolves it from its own working directory
        raise ConfigurationError(
            field, submit_directory, "a relative path", f"pass {path.resolve().as_uri()!r}"
        )
    if not path.exists():
        raise ConfigurationError(
            field,
            submit_directory,
            f"{path} does not exist",
            "pass the path of a sourcedir.tar.gz or a directory",
        )


def check_location(uri: str | None, field: str, is_local: bool) -> str | None:
    """An output location (``s3://``; ``file://`` or a path only for local runs, writable)."""
    if uri is None:
        return None
    if not isinstance(uri, str):
        raise ConfigurationError(field, uri, "must be a URI string", "pass s3://bucket/prefix")
    scheme = urlparse(uri).scheme
    if scheme == "s3":
        return channel_inputs.validate_s3_uri(uri, field)
    if scheme == "file":
        path = channel_inputs.file_uri_path(uri, field)
        if not is_local:
            raise ConfigurationError(
                field,
                uri,
                "file:// paths work only for local runs",
                "use an s3:// URI, or sagemaker_session=LocalSession()",
            )
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise ConfigurationError(
                field,
                uri,
                f"not writable ({existing} cannot be written)",
                "pass a directory you can write to",
            )
        return uri
    if scheme == "" and uri.lower().startswith("s3/"):
        # s3//bucket/out: a mistyped S3 URI that a local run would take as a directory "s3/bucket".
        raise ConfigurationError(
            field,
            uri,
            "reads as an S3 URI without its ':', and would be taken as the local directory s3/",
            f"write s3://{uri[3:].lstrip('/')}, or ./{uri} if a local directory named s3 is meant",
        )
    if scheme == "" and is_local:
        path = Path(uri).expanduser().resolve()
        return check_location(path.as_uri() + ("/" if uri.endswith("/") else ""), field, is_local)
    raise ConfigurationError(
        field, uri, "must start with s3:// (or file:// for local runs)", "pass e.g. s3://my-bucket/output"
    )


def positive_int(value: Any, field: str, unit: str) -> int:
    """``value`` when it is an integer >= 1 (``unit`` shows in the fix)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(field, value, "must be an integer >= 1", f"pass a number of {unit}")
    return value


def check_environment(environment: Mapping[str, str] | None) -> dict[str, str] | None:
    """CreateTrainingJob's limits on ``Environment``; ``SMLAUNCH_FAULTS`` parsed as well."""
    if environment is None:
        return None
    if not isinstance(environment, Mapping):
        raise ConfigurationError(
            "environment", environment, "must be a dict of str -> str", "pass e.g. {'NCCL_DEBUG': 'INFO'}"
        )
    if len(environment) > 100:
        raise ConfigurationError(
            "environment",
            f"<{len(environment)} entries>",
            "CreateTrainingJob accepts at most 100 variables",
            "pass fewer",
        )
    for key, value in environment.items():
        if (
            not isinstance(key, str)
            or len(key) > MAX_ENVIRONMENT_CHARS
            or not naming.ENVIRONMENT_KEY_PATTERN.fullmatch(key)
        ):
            raise ConfigurationError(
                "environment key",
                key,
                "not a valid variable name",
                "use letters, digits and '_', not starting with a digit",
            )
        if (
            not isinstance(value, str)
            or len(value) > MAX_ENVIRONMENT_CHARS
            or not naming.ENVIRONMENT_VALUE_PATTERN.fullmatch(value)
        ):
            raise ConfigurationError(
                f"environment[{key!r}]",
                value,
                "must be a string of at most 512 characters",
                f"pass str(value), e.g. {{{key!r}: '1'}}",
            )
    # Checked here, not when a host starts: a typo fails before staging.
    from smlaunch.contract.archive import ArchiveLimits
    from smlaunch.contract.errors import FieldError

    if contract.SMLAUNCH_FAULTS in environment:
        from smlaunch.contract.faults import parse_faults

        try:
            parse_faults(environment[contract.SMLAUNCH_FAULTS])
        except FieldError as exc:
            raise ConfigurationError(
                f"environment[{contract.SMLAUNCH_FAULTS!r}]", exc.value, exc.problem, exc.fix
            ) from None
    try:
        ArchiveLimits.from_environ(environment)
    except FieldError as exc:
        raise ConfigurationError(f"environment[{exc.field!r}]", exc.value, exc.problem, exc.fix) from None
    return dict(environment)


def check_metrics(metric_definitions: Any) -> list[dict[str, str]] | None:
    """``[{'Name', 'Regex'}]`` with regexes that compile."""
    if metric_definitions is None:
        return None
    if not isinstance(metric_definitions, list):
        raise ConfigurationError(
            "metric_definitions",
            metric_definitions,
            "must be a list",
            "pass [{'Name': 'loss', 'Regex': 'loss=([0-9.]+)'}]",
        )
    for index, metric in enumerate(metric_definitions):
        field = f"metric_definitions[{index}]"
        if not isinstance(metric, Mapping) or set(metric) != {"Name", "Regex"}:
            raise ConfigurationError(
                field,
                metric,
                "must be a dict with exactly 'Name' and 'Regex'",
                "pass {'Name': 'loss', 'Regex': 'loss=([0-9.]+)'}",
            )
        for key in ("Name", "Regex"):
            require_type(f"{field}.{key}", metric[key], str, "pass a string")
    # The patterns as the log scraper compiles them (a capture group holds the value): a regex that
    # could never yield a value is refused here, not when the job's first line is read.
    MetricParser(metric_definitions)
    return [dict(m) for m in metric_definitions]


def check_tags(tags: Any) -> list[dict[str, str]] | None:
    """Tags as ``[{'Key', 'Value'}]`` (a dict is accepted and converted)."""
    if tags is None:
        return None
    if isinstance(tags, Mapping):
        tags = [{"Key": k, "Value": v} for k, v in tags.items()]
    if not isinstance(tags, list) or not all(
        isinstance(t, Mapping)
        and set(t) == {"Key", "Value"}
        and isinstance(t["Key"], str)
        and isinstance(t["Value"], str)
        for t in tags
    ):
        raise ConfigurationError(
            "tags",
            tags,
            "must be a list of {'Key': str, 'Value': str}",
            "pass [{'Key': 'team', 'Value': 'ml'}]",
        )
    return [dict(t) for t in tags]


def check_spot(max_wait: Any, use_spot_instances: bool, max_run: int, is_local: bool) -> int | None:
    """``max_wait`` goes with managed spot and is at least ``max_run``."""
    if max_wait is None:
        if use_spot_instances and not is_local:
            raise ConfigurationError(
                "max_wait",
                None,
                "managed spot training needs max_wait",
                f"pass max_wait >= max_run ({max_run})",
            )
        return None
    wait = positive_int(max_wait, "max_wait", "seconds")
    if not use_spot_instances:
        raise ConfigurationError(
            "max_wait",
            wait,
            "applies only to spot training",
            "pass use_spot_instances=True, or drop max_wait",
        )
    if wait < max_run:
        raise ConfigurationError(
            "max_wait", wait, f"must be >= max_run ({max_run})", f"pass max_wait={max_run} or more"
        )
    return wait


def check_checkpoints(
    s3_uri: str | None, local_path: str | None, is_local: bool
) -> tuple[str | None, str | None]:
    """``checkpoint_s3_uri`` (an output location), and an absolute ``checkpoint_local_path`` (needs it)."""
    if local_path is not None and s3_uri is None:
        raise ConfigurationError(
            "checkpoint_local_path", local_path, "needs checkpoint_s3_uri", "pass checkpoint_s3_uri as well"
        )
    if s3_uri is not None:
        s3_uri = check_location(s3_uri, "checkpoint_s3_uri", is_local)
    if local_path is not None and not str(local_path).startswith("/"):
        raise ConfigurationError(
            "checkpoint_local_path", local_path, "must be an absolute path", "pass e.g. /opt/ml/checkpoints"
        )
    return s3_uri, local_path


def check_tensorboard(config: Any, is_local: bool) -> TensorBoardOutputConfig | None:
    """The config with its ``s3_output_path`` checked as an output location (``file://`` and
    local paths only for local runs). Where ``LocalPath`` may point is the backend's check."""
    if config is None:
        return None
    if not isinstance(config, TensorBoardOutputConfig):
        raise ConfigurationError(
            "tensorboard_output_config",
            config,
            "must be a TensorBoardOutputConfig",
            "pass TensorBoardOutputConfig('s3://my-bucket/my-job/tensorboard')",
        )
    field = "tensorboard_output_config.s3_output_path"
    uri = check_location(config.s3_output_path, field, is_local) or config.s3_output_path
    return TensorBoardOutputConfig(uri, config.container_local_output_path)
