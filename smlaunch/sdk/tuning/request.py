"""Building CreateHyperParameterTuningJob, as SDK v2's ``_TuningJob._get_tuner_args`` and
``Session._get_tuning_request`` build it.

:class:`TunerArgs` is a tuner's checked constructor arguments; :func:`build` is a function of them,
the estimator's :class:`~smlaunch.sdk.request.args.EstimatorArgs` and the CreateTrainingJob spec the
estimator's own builder made for the same inputs and name (:func:`smlaunch.sdk.request.build.build`):
the ``TrainingJobDefinition`` is that spec's fields, re-shaped as the SDK re-shapes them (the tuned
names leave the static hyperparameters, resources become ``HyperParameterTuningResourceConfig``,
the metric definitions are the tuner's, debugger, profiler, TensorBoard and warm pools are not
sent). No I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pydantic import ConfigDict

from smlaunch.sdk import inputs as channel_inputs
from smlaunch.sdk.request import naming
from smlaunch.sdk.request.args import EstimatorArgs
from smlaunch.sdk.request.spec import TrainingJobSpec, WireRequest
from smlaunch.sdk.tuning.configs import StrategyConfig, TuningJobCompletionCriteriaConfig, WarmStartConfig
from smlaunch.sdk.tuning.parameters import ParameterRange, parameter_ranges

MAX_TUNING_JOB_NAME_CHARS = 32
"""HyperParameterTuningJobName's limit (the SDK's ``TUNING_JOB_NAME_MAX_LENGTH``)."""
TUNING_JOB_NAME_PATTERN = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,31}")
_SHORT_TIMESTAMP_SUFFIX = re.compile(r"-\d{6}-\d{4}$")
ESTIMATOR_CLASS_KEY = "sagemaker_estimator_class_name"
ESTIMATOR_MODULE_KEY = "sagemaker_estimator_module"
SDK_CLASSES = {
    None: ("Estimator", "sagemaker.estimator"),
    "pytorch": ("PyTorch", "sagemaker.pytorch.estimator"),
    "tensorflow": ("TensorFlow", "sagemaker.tensorflow.estimator"),
}
"""framework -> the SDK's estimator class and module, which a framework estimator's tuning job names
in its static hyperparameters (so the SDK's ``attach``, and ours, rebuild the right class)."""
OBJECTIVE_KEY = "_tuning_objective_metric"
"""The static hyperparameter SageMaker adds to a tuning job's description (``attach`` drops it)."""
# TrainingJobDefinition fields copied from the CreateTrainingJob spec, when set.
_COPIED_FIELDS = (
    "RoleArn",
    "OutputDataConfig",
    "StoppingCondition",
    "InputDataConfig",
    "VpcConfig",
    "EnableNetworkIsolation",
    "EnableInterContainerTrafficEncryption",
    "EnableManagedSpotTraining",
    "CheckpointConfig",
    "RetryStrategy",
    "Environment",
)


@dataclass(frozen=True)
class TunerArgs:
    """The checked arguments of ``HyperparameterTuner``: SDK v2's names (``max_jobs`` resolved: 1
    when unset, but for ``Grid``, which searches every combination)."""

    objective_metric_name: str
    hyperparameter_ranges: dict[str, ParameterRange]
    metric_definitions: list[dict[str, str]] | None = None
    strategy: str = "Bayesian"
    objective_type: str = "Maximize"
    max_jobs: int | None = 1
    max_parallel_jobs: int = 1
    max_runtime_in_seconds: int | None = None
    tags: list[dict[str, str]] | None = None
    base_tuning_job_name: str | None = None
    early_stopping_type: str = "Off"
    random_seed: int | None = None
    warm_start_config: WarmStartConfig | None = None
    strategy_config: StrategyConfig | None = None
    completion_criteria_config: TuningJobCompletionCriteriaConfig | None = None


class TuningJobRequest(WireRequest):
    """CreateHyperParameterTuningJob: what ``tuner.plan()`` returns and ``fit()`` sends. The nested
    configurations are the API's own dicts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    HyperParameterTuningJobName: str
    HyperParameterTuningJobConfig: dict[str, Any]
    TrainingJobDefinition: dict[str, Any] | None = None
    TrainingJobDefinitions: list[dict[str, Any]] | None = None
    """A multi-estimator tuner's, one per estimator (:mod:`smlaunch.sdk.tuning.multi`), instead of
    ``TrainingJobDefinition``."""
    WarmStartConfig: dict[str, Any] | None = None
    Tags: list[dict[str, str]] | None = None


def validate_tuning_job_name(name: object, field: str = "job_name") -> str:
    """Return ``name`` when SageMaker would accept it as a tuning job's, else :class:`ConfigurationError`."""
    return naming.check_name(
        name,
        field,
        TUNING_JOB_NAME_PATTERN,
        f"tuning job names must be 1 to {MAX_TUNING_JOB_NAME_CHARS} characters",
        "use e.g. 'bert-tune-1', or set base_tuning_job_name and let smlaunch add the timestamp",
    )


def tuning_job_name(base: str, now: datetime | None = None) -> str:
    """``<base>-yymmdd-HHMM`` (UTC), the base truncated to fit 32 characters, as the SDK's
    ``name_from_base(base, max_length=32, short=True)``."""
    stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%y%m%d-%H%M")
    return f"{base[: MAX_TUNING_JOB_NAME_CHARS - len(stamp) - 1]}-{stamp}"


def base_from_tuning_job_name(name: str) -> str:
    """Strip the timestamp :func:`tuning_job_name` appended (used by ``attach``)."""
    return _SHORT_TIMESTAMP_SUFFIX.sub("", name)


def static_hyperparameters(
    tuner: TunerArgs, args: EstimatorArgs, spec: TrainingJobSpec, include_cls_metadata: bool
) -> dict[str, str]:
    """The training request's hyperparameters but the tuned ones; a framework estimator's (or, with
    ``include_cls_metadata``, any estimator's) class and module as the SDK names them."""
    static = {k: v for k, v in spec.HyperParameters.items() if k not in tuner.hyperparameter_ranges}
    if include_cls_metadata or args.framework is not None:
        class_name, module = SDK_CLASSES[args.framework]
        static[ESTIMATOR_CLASS_KEY] = json.dumps(class_name)
        static[ESTIMATOR_MODULE_KEY] = json.dumps(module)
    return static


def training_job_definition(
    tuner: TunerArgs,
    args: EstimatorArgs,
    spec: TrainingJobSpec,
    inputs: Any,
    include_cls_metadata: bool = False,
) -> dict[str, Any]:
    """The ``TrainingJobDefinition`` of the trials, from the estimator's CreateTrainingJob ``spec``."""
    wire = spec.to_request()
    resources = spec.ResourceConfig
    resource_config: dict[str, Any] = {
        "InstanceCount": resources.InstanceCount,
        "InstanceType": resources.InstanceType,
        "VolumeSizeInGB": resources.VolumeSizeInGB,
    }
    if resources.VolumeKmsKeyId is not None:
        resource_config["VolumeKmsKeyId"] = resources.VolumeKmsKeyId
    input_mode = args.input_mode
    # As the SDK: one TrainingInput's own InputMode is the trials' TrainingInputMode.
    if isinstance(inputs, channel_inputs.TrainingInput) and "InputMode" in inputs.config:
        input_mode = inputs.config["InputMode"]
    algorithm: dict[str, Any] = {"TrainingInputMode": input_mode}
    if tuner.metric_definitions is not None:
        algorithm["MetricDefinitions"] = [dict(m) for m in tuner.metric_definitions]
    algorithm["TrainingImage"] = spec.AlgorithmSpecification.TrainingImage
    definition: dict[str, Any] = {
        "StaticHyperParameters": static_hyperparameters(tuner, args, spec, include_cls_metadata),
        "HyperParameterTuningResourceConfig": resource_config,
        "AlgorithmSpecification": algorithm,
    }
    definition.update({key: wire[key] for key in _COPIED_FIELDS if key in wire})
    return definition


def tuning_job_config(tuner: TunerArgs, args: EstimatorArgs) -> dict[str, Any]:
    """``HyperParameterTuningJobConfig``: strategy, limits, early stopping, objective, ranges."""
    limits: dict[str, Any] = {"MaxParallelTrainingJobs": tuner.max_parallel_jobs}
    if tuner.max_jobs is not None:
        limits["MaxNumberOfTrainingJobs"] = tuner.max_jobs
    if tuner.max_runtime_in_seconds is not None:
        limits["MaxRuntimeInSeconds"] = tuner.max_runtime_in_seconds
    config: dict[str, Any] = {
        "Strategy": tuner.strategy,
        "ResourceLimits": limits,
        "TrainingJobEarlyStoppingType": tuner.early_stopping_type,
        "HyperParameterTuningJobObjective": {
            "Type": tuner.objective_type,
            "MetricName": tuner.objective_metric_name,
        },
        "ParameterRanges": parameter_ranges(
            tuner.hyperparameter_ranges, json_categories=args.framework is not None
        ),
    }
    if tuner.random_seed is not None:
        config["RandomSeed"] = tuner.random_seed
    if tuner.strategy_config is not None:
        config["StrategyConfig"] = tuner.strategy_config.to_input_req()
    if tuner.completion_criteria_config is not None:
        config["TuningJobCompletionCriteria"] = tuner.completion_criteria_config.to_input_req()
    return config


def tags(tuner: TunerArgs, args: EstimatorArgs) -> list[dict[str, str]] | None:
    """The tuner's tags, then the estimator's that are not among them, as the SDK merges them."""
    merged = [dict(t) for t in tuner.tags] if tuner.tags is not None else None
    for tag in args.tags or []:
        merged = merged if merged is not None else []
        if tag not in merged:
            merged.append(dict(tag))
    return merged


def build(
    tuner: TunerArgs,
    args: EstimatorArgs,
    spec: TrainingJobSpec,
    inputs: Any,
    name: str,
    include_cls_metadata: bool = False,
) -> TuningJobRequest:
    """The CreateHyperParameterTuningJob request named ``name`` whose trials are ``spec``'s job."""
    return TuningJobRequest(
        HyperParameterTuningJobName=validate_tuning_job_name(name),
        HyperParameterTuningJobConfig=tuning_job_config(tuner, args),
        TrainingJobDefinition=training_job_definition(tuner, args, spec, inputs, include_cls_metadata),
        WarmStartConfig=tuner.warm_start_config.to_input_req() if tuner.warm_start_config else None,
        Tags=tags(tuner, args),
    )
