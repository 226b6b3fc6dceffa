"""Building the CreateTrainingJob request from an estimator: what ``plan()`` returns and ``fit()`` sends.

As the SageMaker SDK keeps ``_TrainingJob._get_train_args`` out of the estimator, the request is
built here from the estimator's checked arguments: channels, the script-mode and distribution
hyperparameters, image, output, resources, stopping condition, checkpoints, debugger and profiler
settings. Pure but for two reads: that local input paths exist and, for a SageMaker session without
an ``output_path``, the session resolving its default bucket. Subclass hooks of the estimator
(``_image``, ``_framework_hyperparameters``, ``_metrics_time_series``, ``_debug_hook_config``) say
what a framework adds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from estimator import hyperparameters as hp
from estimator import inputs as channel_inputs
from estimator import validation
from estimator.errors import ConfigurationError
from estimator.settings import drop_smlaunch_variables
from estimator.spec import (
    AlgorithmSpecification,
    Channel,
    CheckpointConfig,
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

if TYPE_CHECKING:
    from estimator.estimator import Estimator

CODE_CHANNEL = "code"
CODE_CHANNEL_SOURCEDIR_PATH = "/opt/ml/input/data/code/sourcedir.tar.gz"
# fw_utils.DEBUGGER_UNSUPPORTED_REGIONS / PROFILER_UNSUPPORTED_REGIONS (identical lists in 2.257.7).
DEBUGGER_UNSUPPORTED_REGIONS = frozenset(
    {
        "us-iso-east-1",
        "us-isob-east-1",
        "ap-southeast-3",
        "ap-southeast-4",
        "eu-south-2",
        "me-central-1",
        "ap-south-2",
        "eu-central-2",
        "us-gov-east-1",
    }
)


def join_uri(base: str, *parts: str) -> str:
    """``base`` and ``parts`` joined with exactly one ``/`` after ``base``."""
    return "/".join([base.rstrip("/"), *parts])


def code_uri(estimator: Estimator, job_name: str, output_path: str) -> str | None:
    """Where ``sourcedir.tar.gz`` will be staged: code_location, else the output bucket's root
    (below the session's ``default_bucket_prefix`` when the output path is the session's default,
    as the SDK does), else for ``file://`` output the output path itself."""
    if estimator.entry_point is None:
        return None
    if estimator.source_dir is not None and validation.is_uri(estimator.source_dir):
        return estimator.source_dir
    if estimator.code_location:
        base = estimator.code_location
    elif urlparse(output_path).scheme == "s3":
        # The SDK keeps the session's default_bucket_prefix only when the output path is the
        # session's default (s3://<bucket>/<prefix>/); a path the user gave counts by its bucket.
        base = output_path if estimator.output_path is None else f"s3://{urlparse(output_path).netloc}"
    else:
        base = output_path
    return join_uri(base, job_name, "source", contract.SOURCEDIR_TARBALL)


def program(estimator: Estimator) -> str:
    """``sagemaker_program``: the entry point's path inside the unpacked code."""
    assert estimator.entry_point is not None
    entry_point = estimator.entry_point
    return entry_point if estimator.source_dir is not None else os.path.basename(entry_point)


def build(
    estimator: Estimator,
    inputs: Any,
    job_name: str | None,
    now: datetime | None = None,
    experiment_config: Mapping[str, str] | None = None,
) -> tuple[TrainingJobSpec, list[tuple[str, str]]]:
    """The spec, and the local input paths to upload as (channel, path) before submitting.
    ``now``: the time a generated job name carries (default: the clock)."""
    session = estimator.sagemaker_session
    name = estimator._job_name(job_name, now)
    region = str(session.region_name)
    output_path = estimator._output_path()

    uploads: list[tuple[str, str]] = []
    staged_inputs = _stage_plan_inputs(estimator, inputs, name, output_path, uploads)
    channels = channel_inputs.channels(staged_inputs, local=estimator.is_local)

    wire = estimator._hyperparameters_wire()
    code_uri_ = code_uri(estimator, name, output_path)
    if code_uri_ is not None:
        submit_directory = code_uri_
        if estimator._enable_network_isolation:
            # As the SDK: an isolated container cannot read S3, so the code comes in as a channel.
            if any(c.ChannelName == CODE_CHANNEL for c in channels or []):
                raise ConfigurationError(
                    f"inputs[{CODE_CHANNEL!r}]",
                    CODE_CHANNEL,
                    "with enable_network_isolation the code uses this channel",
                    "rename your channel",
                )
            # Not checked for existence: the code is staged there only by fit().
            code_channel = Channel.model_validate(
                {**channel_inputs.TrainingInput(code_uri_).config, "ChannelName": CODE_CHANNEL}
            )
            channels = [*(channels or []), code_channel]
            submit_directory = CODE_CHANNEL_SOURCEDIR_PATH
        wire.update(
            hp.encode(
                {
                    contract.HP_SUBMIT_DIRECTORY: submit_directory,
                    contract.HP_PROGRAM: program(estimator),
                    contract.HP_LOG_LEVEL: estimator.container_log_level,
                    contract.HP_JOB_NAME: name,
                    contract.HP_REGION: region,
                }
            )
        )
    distribution = estimator._distribution.to_hyperparameters(estimator.instance_type)
    wire.update(hp.encode(distribution, "distribution"))
    wire.update(hp.encode(estimator._framework_hyperparameters(name, output_path)))
    hp.check_limits(wire)

    algorithm: dict[str, Any] = {"TrainingInputMode": estimator.input_mode}
    image = estimator._image(region)
    if image is not None:
        algorithm["TrainingImage"] = image
    if estimator.metric_definitions:
        algorithm["MetricDefinitions"] = [MetricDefinition(**m) for m in estimator.metric_definitions]
    if estimator._metrics_time_series() is not None:
        algorithm["EnableSageMakerMetricsTimeSeries"] = estimator._metrics_time_series()

    output: dict[str, Any] = {"S3OutputPath": output_path}
    if estimator.output_kms_key is not None:
        output["KmsKeyId"] = estimator.output_kms_key
    if estimator.disable_output_compression:
        output["CompressionType"] = "NONE"

    spec = TrainingJobSpec(
        TrainingJobName=name,
        AlgorithmSpecification=AlgorithmSpecification(**algorithm),
        RoleArn=session.expand_role(estimator.role),
        OutputDataConfig=OutputDataConfig(**output),
        ResourceConfig=ResourceConfig(
            InstanceType=estimator.instance_type,
            InstanceCount=estimator.instance_count,
            VolumeSizeInGB=estimator.volume_size,
            VolumeKmsKeyId=estimator.volume_kms_key,
            KeepAlivePeriodInSeconds=estimator.keep_alive_period_in_seconds,
        ),
        StoppingCondition=StoppingCondition(
            MaxRuntimeInSeconds=estimator.max_run, MaxWaitTimeInSeconds=estimator.max_wait
        ),
        HyperParameters=wire,
        InputDataConfig=channels,
        CheckpointConfig=(
            CheckpointConfig(S3Uri=estimator.checkpoint_s3_uri, LocalPath=estimator.checkpoint_local_path)
            if estimator.checkpoint_s3_uri
            else None
        ),
        # smlaunch's own SMLAUNCH_* knobs configure local runs: never sent to SageMaker.
        Environment=(
            estimator.environment if session.is_local else drop_smlaunch_variables(estimator.environment)
        )
        or None,
        VpcConfig=(
            VpcConfig(SecurityGroupIds=estimator.security_group_ids, Subnets=estimator.subnets)
            if estimator.subnets and estimator.security_group_ids
            else None
        ),
        EnableNetworkIsolation=True if estimator._enable_network_isolation else None,
        EnableInterContainerTrafficEncryption=True if estimator.encrypt_inter_container_traffic else None,
        EnableManagedSpotTraining=True if estimator.use_spot_instances else None,
        RetryStrategy=(
            RetryStrategy(MaximumRetryAttempts=estimator.max_retry_attempts)
            if estimator.max_retry_attempts
            else None
        ),
        Tags=[Tag(**t) for t in estimator.tags] if estimator.tags else None,
        DebugHookConfig=estimator._debug_hook_config(region, output_path),
        ProfilerConfig=_profiler_config(estimator, region, output_path),
        TensorBoardOutputConfig=(
            TensorBoardOutputSpec(**estimator.tensorboard_output_config._to_request_dict())
            if estimator.tensorboard_output_config is not None
            else None
        ),
        ExperimentConfig=validation.experiment_config(experiment_config),
    )
    return spec, uploads


def _stage_plan_inputs(
    estimator: Estimator, inputs: Any, job_name: str, output_path: str, uploads: list[tuple[str, str]]
) -> Any:
    """For a SageMaker session, scheme-less local paths become the S3 prefix they will be
    uploaded to (``Session.stage_local_input``); recorded in ``uploads``."""
    if estimator.is_local or not isinstance(inputs, (str, Mapping)):
        return inputs
    mapping = {channel_inputs.DEFAULT_CHANNEL: inputs} if isinstance(inputs, str) else dict(inputs)
    for channel, value in mapping.items():
        if isinstance(value, str) and urlparse(value).scheme == "" and value:
            channel_inputs.validate_channel_name(channel)
            if not Path(value).expanduser().exists():
                raise ConfigurationError(
                    f"inputs[{channel!r}]",
                    value,
                    "no such file or directory",
                    "pass an existing local path or an s3:// URI",
                )
            bucket_root = estimator.sagemaker_session.default_output_path()
            mapping[channel] = join_uri(bucket_root, job_name, "input", channel) + "/"
            uploads.append((channel, str(Path(value).expanduser().resolve())))
    return mapping


def _profiler_config(estimator: Estimator, region: str, output_path: str) -> ProfilerConfig | None:
    if estimator.is_local:
        return None
    # fw_utils._instance_type_supports_profiler: despite its name, True turns profiling off (trn*).
    if estimator.disable_profiler or region in DEBUGGER_UNSUPPORTED_REGIONS or estimator.instance.is_neuron:
        return ProfilerConfig(DisableProfiler=True)
    return ProfilerConfig(S3OutputPath=output_path, DisableProfiler=False)
