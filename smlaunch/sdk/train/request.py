"""The CreateTrainingJob request of a ``ModelTrainer``: what SDK v3's ``_create_training_job_args``
builds, as our :class:`~smlaunch.sdk.request.spec.TrainingJobSpec`, and what must be staged first.

Pure but for the session naming its default output path. v3's rules, followed here:

- the job is ``<base_job_name>-<YYYYmmddHHMMSS>`` (``_`` turned into ``-``, at most 63 characters);
- every hyperparameter is ``safe_serialize``-d (a string as it is, anything else JSON); ``SMP``
  adds ``mp_parameters``; no ``sagemaker_*`` key is added;
- with ``source_code``, the job gets the ``code`` channel (``source_dir``; none without one) and
  the ``sm_drivers`` channel, after the user's channels, and the container is started with
  ``/bin/bash -c "... sm_train.sh"`` (:data:`smlaunch.contract.v3.CONTAINER_ARGUMENTS`);
- a local path (code, drivers, an ``InputData``) is uploaded to
  ``<default output path><input_s3_key_prefix or base_job_name>/<job>/input/<channel>``; a channel
  from a string is ``S3Prefix``, ``FullyReplicated``, ``InputMode: File``; one from an
  ``S3DataSource`` is sent as it is;
- ``OutputDataConfig`` defaults to ``<default output path><base_job_name>``, ``GZIP``;
  checkpoints without ``s3_uri`` go to ``<default output path><base_job_name>/<job>/checkpoints``,
  TensorBoard output without one to ``<default output path><base_job_name>``.

On the emulated platform the default output path is the session's ``file://`` job store, where
the job's own directory stands for ``<base_job_name>/<job>`` (the store holds jobs only); a local
``source_dir`` and local inputs are read in place (as every local input of the emulated platform;
``ignore_patterns`` apply to uploads), and the drivers lie in a shared directory beside the store
(:func:`smlaunch.sdk.train.drivers.local_drivers_dir`). On Kubernetes the default output path (the
bucket, or the claim's ``jobs/``) stands for it too; the code and drivers are staged below it, and
so are local inputs with S3 storage (as v3 uploads them; on a claim, as the session stages them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from smlaunch.contract import v3 as v3_contract
from smlaunch.sdk.request import naming
from smlaunch.sdk.request.spec import (
    AlgorithmSpecification,
    Channel,
    CheckpointConfig,
    MetricDefinition,
    OutputDataConfig,
    ResourceConfig,
    RetryStrategy,
    StoppingCondition,
    Tag,
    TensorBoardOutputConfig,
    TrainingJobSpec,
    VpcConfig,
)
from smlaunch.sdk.sessions.settings import drop_smlaunch_variables
from smlaunch.sdk.train import configs
from smlaunch.sdk.train.drivers import driver_files, local_drivers_dir

MAX_JOB_NAME_CHARS = 63


@dataclass(frozen=True)
class Upload:
    """A local file tree to put at ``uri`` before the job is submitted."""

    channel: str
    source: Path | None
    """The local tree (None for the drivers: :attr:`files`, written at staging time)."""
    uri: str
    ignore_patterns: tuple[str, ...] = ()
    files: dict[str, bytes] | None = None
    """The drivers channel's files."""
    local: Path | None = None
    """For a local job's drivers: the shared directory they are written to before the checks
    (a ``file://`` channel must exist when the backend checks it)."""


@dataclass(frozen=True)
class Plan:
    """A planned job: its request and what to stage for it."""

    spec: TrainingJobSpec
    uploads: list[Upload] = field(default_factory=list)


def join(base: str, *parts: str) -> str:
    """``base`` and ``parts`` with one ``/`` between each."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def job_name(base: str, now: datetime) -> str:
    """v3's ``_get_unique_name``: ``<base>-<YYYYmmddHHMMSS>``, ``_`` as ``-``, 63 characters at most."""
    return f"{base.replace('_', '-')}-{now.strftime('%Y%m%d%H%M%S')}"[:MAX_JOB_NAME_CHARS]


def _channel_from_uri(name: str, uri: str) -> Channel:
    return Channel.model_validate(
        {
            "ChannelName": name,
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": uri,
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
            "InputMode": "File",
        }
    )


def _channel(data: configs.InputData | configs.Channel, staged: str | None) -> Channel:
    """The wire channel of ``data``; ``staged``: where its local path is staged."""
    if isinstance(data, configs.Channel):
        return Channel.model_validate(_pascal(data.model_dump(exclude_none=True)))
    source = data.data_source
    if isinstance(source, str):
        channel = _channel_from_uri(data.channel_name, staged or source)
    elif isinstance(source, configs.S3DataSource):
        channel = Channel.model_validate(
            {"ChannelName": data.channel_name, "DataSource": {"S3DataSource": _pascal(source.model_dump())}}
        )
    else:
        channel = Channel.model_validate(
            {
                "ChannelName": data.channel_name,
                "DataSource": {"FileSystemDataSource": _pascal(source.model_dump())},
            }
        )
    if data.content_type:
        channel = channel.model_copy(update={"ContentType": data.content_type})
    return channel


_ACRONYMS = {"s3": "S3", "kms": "Kms", "uri": "Uri", "id": "Id", "ids": "Ids", "gb": "GB"}


def _pascal(value: Any) -> Any:
    """snake_case keys to the API's PascalCase (``s3_uri`` -> ``S3Uri``), None values dropped."""
    if isinstance(value, dict):
        return {
            "".join(_ACRONYMS.get(p, p.capitalize()) for p in key.split("_")): _pascal(item)
            for key, item in value.items()
            if item is not None
        }
    if isinstance(value, list):
        return [_pascal(item) for item in value]
    return value


def merged_inputs(
    trainer: Any, given: list[configs.InputData | configs.Channel] | None
) -> list[configs.InputData | configs.Channel]:
    """The trainer's channels with ``given`` merged in by name (``given`` wins), as v3 merges them."""
    existing = {data.channel_name: data for data in trainer.input_data_config or []}
    new: list[configs.InputData | configs.Channel] = []
    for data in given or []:
        if data.channel_name in existing:
            existing[data.channel_name] = data
        else:
            new.append(data)
    return [*existing.values(), *new]


def is_local_path(value: str) -> bool:
    return "://" not in value


def build(
    trainer: Any,  # a ModelTrainer (typed loosely: it imports this module)
    input_data_config: list[configs.InputData | configs.Channel] | None,
    now: datetime,
) -> Plan:
    """The job's request and uploads (the module docstring's rules)."""
    session = trainer.sagemaker_session
    base = str(trainer.base_job_name)
    name = naming.validate_job_name(job_name(base, now), "base_job_name")
    root = session.default_output_path()
    # The emulated platform's default output path is its job store, where every directory is a
    # job's: there the job's own directory takes the place of <base_job_name>/<job>.
    prefix = root if session.is_local else join(root, base)

    # v3 stages local files under input_s3_key_prefix (a pipeline's name, say), else the base.
    staging_root = prefix if session.is_local else join(root, trainer.input_s3_key_prefix or base)

    def staging(channel: str) -> str:
        return join(staging_root, name, "input", channel)

    # A session with a job store on this machine (LocalSession, SlurmSession) reads local files in
    # place; another that runs jobs off SageMaker on a shared file system (Kubernetes on a claim)
    # has local inputs staged its own way; one whose jobs read S3 (SageMaker, Kubernetes on S3)
    # gets them uploaded, as v3 uploads them.
    store = getattr(session, "root", None) if session.is_local else None
    stages_in_place = session.is_local and not root.startswith("s3://")

    uploads: list[Upload] = []
    channels: list[Channel] = []
    for data in merged_inputs(trainer, input_data_config):
        staged = None
        if isinstance(data, configs.InputData) and isinstance(data.data_source, str):
            if is_local_path(data.data_source):
                path = Path(data.data_source).expanduser().resolve()
                if store is not None:
                    staged = path.as_uri()
                elif stages_in_place:
                    staged = session.stage_local_input(path, name, data.channel_name)
                else:
                    staged = staging(data.channel_name)
                    uploads.append(Upload(data.channel_name, path, staged))
        channels.append(_channel(data, staged))

    source_code = trainer.source_code
    entrypoint = arguments = None
    hyperparameters = {k: v3_contract.safe_serialize(v) for k, v in (trainer.hyperparameters or {}).items()}
    if source_code is not None:
        if source_code.source_dir:
            if is_local_path(source_code.source_dir) and store is not None:
                code = Path(source_code.source_dir).expanduser().resolve().as_uri()  # read in place
            elif is_local_path(source_code.source_dir):
                code = staging(v3_contract.CODE_CHANNEL)
                patterns = tuple(source_code.ignore_patterns or ())
                uploads.append(
                    Upload(v3_contract.CODE_CHANNEL, Path(source_code.source_dir).resolve(), code, patterns)
                )
            else:
                code = source_code.source_dir
            channels.append(_channel_from_uri(v3_contract.CODE_CHANNEL, code))
        files = driver_files(source_code, trainer.distributed)
        if store is not None:
            local = local_drivers_dir(Path(str(store)), files)
            drivers_uri = local.as_uri()
            drivers_upload = Upload(v3_contract.DRIVERS_CHANNEL, None, drivers_uri, files=files, local=local)
        else:
            drivers_uri = staging(v3_contract.DRIVERS_CHANNEL)
            drivers_upload = Upload(v3_contract.DRIVERS_CHANNEL, None, drivers_uri, files=files)
        uploads.append(drivers_upload)
        channels.append(_channel_from_uri(v3_contract.DRIVERS_CHANNEL, drivers_uri))
        entrypoint, arguments = v3_contract.CONTAINER_ENTRYPOINT, v3_contract.CONTAINER_ARGUMENTS
        distributed = trainer.distributed
        if distributed is not None and getattr(distributed, "smp", None) is not None:
            hyperparameters.update(distributed.smp._to_mp_hyperparameters())

    compute = trainer.compute
    assert compute is not None and trainer.stopping_condition is not None
    output = trainer.output_data_config or configs.OutputDataConfig()
    checkpoint = trainer.checkpoint_config
    tensorboard = trainer._tensorboard_output_config
    networking = trainer.networking
    stopping = trainer.stopping_condition
    spec = TrainingJobSpec(
        TrainingJobName=name,
        AlgorithmSpecification=AlgorithmSpecification(
            TrainingInputMode=trainer.training_input_mode,
            TrainingImage=trainer.training_image,
            ContainerEntrypoint=entrypoint,
            ContainerArguments=arguments,
            MetricDefinitions=(
                [MetricDefinition(Name=m.name, Regex=m.regex) for m in trainer._metric_definitions]
                if trainer._metric_definitions
                else None
            ),
        ),
        RoleArn=session.expand_role(trainer.role),
        OutputDataConfig=OutputDataConfig(
            S3OutputPath=output.s3_output_path or prefix,
            KmsKeyId=output.kms_key_id,
            CompressionType=output.compression_type or "GZIP",
        ),
        ResourceConfig=ResourceConfig(
            InstanceType=str(compute.instance_type),
            InstanceCount=int(compute.instance_count or 1),
            VolumeSizeInGB=int(compute.volume_size_in_gb or 30),
            VolumeKmsKeyId=compute.volume_kms_key_id,
            KeepAlivePeriodInSeconds=compute.keep_alive_period_in_seconds,
        ),
        StoppingCondition=StoppingCondition(
            MaxRuntimeInSeconds=stopping.max_runtime_in_seconds or 3600,
            MaxWaitTimeInSeconds=stopping.max_wait_time_in_seconds,
            MaxPendingTimeInSeconds=stopping.max_pending_time_in_seconds,
        ),
        HyperParameters=hyperparameters,
        InputDataConfig=channels or None,
        CheckpointConfig=(
            CheckpointConfig(
                S3Uri=checkpoint.s3_uri or join(prefix, name, "checkpoints"),
                LocalPath=checkpoint.local_path,
            )
            if checkpoint is not None
            else None
        ),
        # smlaunch's own SMLAUNCH_* knobs configure local runs: never sent to SageMaker.
        Environment=(
            (
                dict(trainer.environment)
                if session.is_local
                else drop_smlaunch_variables(dict(trainer.environment))
            )
            if trainer.environment
            else None
        ),
        VpcConfig=(
            VpcConfig(SecurityGroupIds=networking.security_group_ids, Subnets=networking.subnets)
            if networking is not None and networking.subnets and networking.security_group_ids
            else None
        ),
        EnableNetworkIsolation=networking.enable_network_isolation if networking else None,
        EnableInterContainerTrafficEncryption=(
            networking.enable_inter_container_traffic_encryption if networking else None
        ),
        EnableManagedSpotTraining=compute.enable_managed_spot_training,
        RetryStrategy=(
            RetryStrategy(MaximumRetryAttempts=trainer._retry_strategy.maximum_retry_attempts)
            if trainer._retry_strategy is not None
            else None
        ),
        Tags=[Tag(Key=t.key, Value=t.value) for t in trainer.tags or [] if t is not None] or None,
        TensorBoardOutputConfig=(
            TensorBoardOutputConfig(
                S3OutputPath=tensorboard.s3_output_path or prefix,
                LocalPath=tensorboard.local_path,
            )
            if tensorboard is not None
            else None
        ),
    )
    return Plan(spec, uploads)
