"""Building the CreateTrainingJob request from an estimator's arguments: what ``plan()`` returns and
``fit()`` sends.

As the SageMaker SDK keeps ``_TrainingJob._get_train_args`` out of the estimator, the request is
built here from the checked arguments (:class:`~smlaunch.sdk.request.args.EstimatorArgs`) and the
session: channels, the script-mode and distribution hyperparameters, image, output, resources,
stopping condition, checkpoints, debugger and profiler settings. Pure but for two reads: that local
input paths exist and, for a SageMaker session without an ``output_path``, the session resolving its
default bucket. What a framework adds (its DLC image, TensorFlow's ``model_dir``, the debugger rule
for parameter servers) is decided here from ``args.framework``; :mod:`.describe` is the inverse.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from smlaunch import contract
from smlaunch.sdk import inputs as channel_inputs
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request import image_uris, naming, validation
from smlaunch.sdk.request.args import EstimatorArgs
from smlaunch.sdk.request.spec import (
    AlgorithmSpecification,
    Channel,
    CheckpointConfig,
    DebugHookConfig,
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
from smlaunch.sdk.request.spec import TensorBoardOutputConfig as TensorBoardOutputSpec
from smlaunch.sdk.sessions.settings import drop_smlaunch_variables

if TYPE_CHECKING:
    from smlaunch.sdk.sessions.protocol import TrainingSession

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


def base_name(args: EstimatorArgs) -> str:
    """The base of generated job names: ``base_job_name``, else the image's repository (the DLC's
    for a framework without ``image_uri``), else ``smlaunch``."""
    if args.base_job_name:
        return args.base_job_name
    if args.image_uri:
        return naming.base_name_from_image(args.image_uri)
    if args.framework is None:
        return "smlaunch"
    row = image_uris.version_config(str(args.framework_version), str(args.py_version), args.framework)
    return str(row["repository"])


def resolve_job_name(args: EstimatorArgs, name: str | None, now: datetime | None = None) -> str:
    """``name`` checked, or a new one from :func:`base_name` and ``now`` (default: the clock)."""
    if name is not None:
        return naming.validate_job_name(name)
    return naming.validate_job_name(naming.name_from_base(base_name(args), now), "base_job_name")


def resolve_output_path(args: EstimatorArgs, session: TrainingSession) -> str:
    """``output_path``, else the session's default."""
    return args.output_path or session.default_output_path()


def hyperparameters_wire(args: EstimatorArgs) -> dict[str, str]:
    """The user's hyperparameters as the SDK sends them: ``json.dumps``-encoded by framework
    estimators; by the generic ``Estimator`` ``str(value)``, or ``json.dumps(value)`` when it has a
    ``source_dir`` (its ``set_hyperparameters`` encodes them then), so a value the notebook
    JSON-encoded itself reaches the script decoded."""
    return hp.encode(args.hyperparameters, as_str=args.framework is None and not args.source_dir)


def training_image(args: EstimatorArgs, region: str) -> str | None:
    """``image_uri``, else the framework's Deep Learning Container for ``region`` (None: a generic
    estimator without an image)."""
    if args.image_uri is not None or args.framework is None:
        return args.image_uri
    version, py, framework = str(args.framework_version), str(args.py_version), args.framework
    if args.is_local and not image_uris.has_region(version, py, region, framework):
        # No registry for this region (LocalSession's is "local"): name the image without one,
        # so the request still says which framework build it is (attach reads it back).
        row = image_uris.version_config(version, py, framework)
        return f"{row['repository']}:{version}-{args.instance.processor}-{py}"
    return image_uris.retrieve(
        version,
        py,
        args.instance,
        region,
        smdistributed=args.distribution.smdistributed is not None,
        framework=framework,
    )


def framework_hyperparameters(args: EstimatorArgs, name: str, output: str) -> dict[str, Any]:
    """Keys a framework adds after the distribution's: TensorFlow's ``model_dir`` (see
    :mod:`smlaunch.sdk.tensorflow`): as given, or ``/opt/ml/model`` with ``mpi``, else
    ``<output>/<job>/model``; none when it is False (every other estimator)."""
    if args.model_dir is False:
        return {}
    if args.model_dir:
        return {"model_dir": args.model_dir}
    mpi = args.distribution.mpi
    if mpi is not None and mpi.enabled:
        return {"model_dir": "/opt/ml/model"}
    return {"model_dir": join_uri(output, name, "model")}


def debug_hook_config(args: EstimatorArgs, region: str, output: str) -> DebugHookConfig | None:
    """The request's ``DebugHookConfig`` (None where the SDK leaves it out)."""
    unsupported = region in DEBUGGER_UNSUPPORTED_REGIONS
    if args.is_local or unsupported or args.debugger_hook_config is False:
        return None
    ps = args.distribution.parameter_server
    if args.framework == "tensorflow" and ps is not None and ps.enabled:
        return None  # as the SDK's TensorFlow: SMDebug cannot follow parameter servers
    # SDK Framework._validate_and_set_debugger_configs: SMDebug cannot follow distributed jobs
    # that checkpoint; for framework estimators (distribution always set) that is every job.
    if (
        args.checkpoint_s3_uri
        and args.checkpoint_local_path
        and (args.framework is not None or args.instance_count > 1)
    ):
        return None
    return DebugHookConfig(S3OutputPath=output, CollectionConfigurations=[])


def code_uri(args: EstimatorArgs, job_name: str, output_path: str) -> str | None:
    """Where ``sourcedir.tar.gz`` will be staged: code_location, else the output bucket's root
    (below the session's ``default_bucket_prefix`` when the output path is the session's default,
    as the SDK does), else for ``file://`` output the output path itself."""
    if args.entry_point is None:
        return None
    if args.source_dir is not None and validation.is_uri(args.source_dir):
        return args.source_dir
    if args.code_location:
        base = args.code_location
    elif urlparse(output_path).scheme == "s3":
        # The SDK keeps the session's default_bucket_prefix only when the output path is the
        # session's default (s3://<bucket>/<prefix>/); a path the user gave counts by its bucket.
        base = output_path if args.output_path is None else f"s3://{urlparse(output_path).netloc}"
    else:
        base = output_path
    return join_uri(base, job_name, "source", contract.SOURCEDIR_TARBALL)


def program(args: EstimatorArgs) -> str:
    """``sagemaker_program``: the entry point's path inside the unpacked code."""
    assert args.entry_point is not None
    entry_point = args.entry_point
    return entry_point if args.source_dir is not None else os.path.basename(entry_point)


def build(
    args: EstimatorArgs,
    session: TrainingSession,
    inputs: Any,
    job_name: str | None,
    now: datetime | None = None,
    experiment_config: Mapping[str, str] | None = None,
) -> tuple[TrainingJobSpec, list[tuple[str, str]]]:
    """The spec, and the local input paths to upload as (channel, path) before submitting.
    ``now``: the time a generated job name carries (default: the clock)."""
    name = resolve_job_name(args, job_name, now)
    region = str(session.region_name)
    output_path = resolve_output_path(args, session)

    uploads: list[tuple[str, str]] = []
    staged_inputs = _stage_plan_inputs(args, session, inputs, name, output_path, uploads)
    channels = channel_inputs.channels(staged_inputs, local=args.is_local)

    wire = hyperparameters_wire(args)
    code_uri_ = code_uri(args, name, output_path)
    if code_uri_ is not None:
        submit_directory = code_uri_
        if args.enable_network_isolation:
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
                    contract.HP_PROGRAM: program(args),
                    contract.HP_LOG_LEVEL: args.container_log_level,
                    contract.HP_JOB_NAME: name,
                    contract.HP_REGION: region,
                }
            )
        )
    distribution = args.distribution.to_hyperparameters(args.instance_type)
    wire.update(hp.encode(distribution, "distribution"))
    wire.update(hp.encode(framework_hyperparameters(args, name, output_path)))
    hp.check_limits(wire)

    algorithm: dict[str, Any] = {"TrainingInputMode": args.input_mode}
    image = training_image(args, region)
    if image is not None:
        algorithm["TrainingImage"] = image
    if args.metric_definitions:
        algorithm["MetricDefinitions"] = [MetricDefinition(**m) for m in args.metric_definitions]
    if args.enable_sagemaker_metrics is not None:
        algorithm["EnableSageMakerMetricsTimeSeries"] = args.enable_sagemaker_metrics

    output: dict[str, Any] = {"S3OutputPath": output_path}
    if args.output_kms_key is not None:
        output["KmsKeyId"] = args.output_kms_key
    if args.disable_output_compression:
        output["CompressionType"] = "NONE"

    spec = TrainingJobSpec(
        TrainingJobName=name,
        AlgorithmSpecification=AlgorithmSpecification(**algorithm),
        RoleArn=session.expand_role(args.role),
        OutputDataConfig=OutputDataConfig(**output),
        ResourceConfig=ResourceConfig(
            InstanceType=args.instance_type,
            InstanceCount=args.instance_count,
            VolumeSizeInGB=args.volume_size,
            VolumeKmsKeyId=args.volume_kms_key,
            KeepAlivePeriodInSeconds=args.keep_alive_period_in_seconds,
        ),
        StoppingCondition=StoppingCondition(
            MaxRuntimeInSeconds=args.max_run, MaxWaitTimeInSeconds=args.max_wait
        ),
        HyperParameters=wire,
        InputDataConfig=channels,
        CheckpointConfig=(
            CheckpointConfig(S3Uri=args.checkpoint_s3_uri, LocalPath=args.checkpoint_local_path)
            if args.checkpoint_s3_uri
            else None
        ),
        # smlaunch's own SMLAUNCH_* knobs configure local runs: never sent to SageMaker.
        Environment=(args.environment if session.is_local else drop_smlaunch_variables(args.environment))
        or None,
        VpcConfig=(
            VpcConfig(SecurityGroupIds=args.security_group_ids, Subnets=args.subnets)
            if args.subnets and args.security_group_ids
            else None
        ),
        EnableNetworkIsolation=True if args.enable_network_isolation else None,
        EnableInterContainerTrafficEncryption=True if args.encrypt_inter_container_traffic else None,
        EnableManagedSpotTraining=True if args.use_spot_instances else None,
        RetryStrategy=(
            RetryStrategy(MaximumRetryAttempts=args.max_retry_attempts) if args.max_retry_attempts else None
        ),
        Tags=[Tag(**t) for t in args.tags] if args.tags else None,
        DebugHookConfig=debug_hook_config(args, region, output_path),
        ProfilerConfig=_profiler_config(args, region, output_path),
        TensorBoardOutputConfig=(
            TensorBoardOutputSpec(**args.tensorboard_output_config._to_request_dict())
            if args.tensorboard_output_config is not None
            else None
        ),
        ExperimentConfig=validation.experiment_config(experiment_config),
    )
    return spec, uploads


def _stage_plan_inputs(
    args: EstimatorArgs,
    session: TrainingSession,
    inputs: Any,
    job_name: str,
    output_path: str,
    uploads: list[tuple[str, str]],
) -> Any:
    """For a SageMaker session, scheme-less local paths become the S3 prefix they will be
    uploaded to (``Session.stage_local_input``); recorded in ``uploads``."""
    if args.is_local or not isinstance(inputs, (str, Mapping)):
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
            bucket_root = session.default_output_path()
            mapping[channel] = join_uri(bucket_root, job_name, "input", channel) + "/"
            uploads.append((channel, str(Path(value).expanduser().resolve())))
    return mapping


def _profiler_config(args: EstimatorArgs, region: str, output_path: str) -> ProfilerConfig | None:
    if args.is_local:
        return None
    # fw_utils._instance_type_supports_profiler: despite its name, True turns profiling off (trn*).
    if args.disable_profiler or region in DEBUGGER_UNSUPPORTED_REGIONS or args.instance.is_neuron:
        return ProfilerConfig(DisableProfiler=True)
    return ProfilerConfig(S3OutputPath=output_path, DisableProfiler=False)
