"""The inverse of :mod:`.build`: a DescribeTrainingJob answer -> the estimator arguments that sent it.

``Estimator.attach`` rebuilds the estimator of an existing job by passing these arguments to its
constructor (which checks them, and applies the session's defaults, as for any estimator). Unlike
SDK v2's ``_prepare_init_params_from_job_description``, the distribution and the metric definitions
are restored too. What the request does not carry (``code_location``, ``dependencies``, a local
``source_dir``: the staged code's URI comes back instead) cannot be restored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from smlaunch import contract
from smlaunch.sdk.debugger import TensorBoardOutputConfig
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request import image_uris, naming
from smlaunch.sdk.request.distribution import DISTRIBUTION_KEYS, Distribution


def arguments(desc: Mapping[str, Any], framework: str | None) -> dict[str, Any]:
    """The constructor's keyword arguments (``sagemaker_session`` aside) of the estimator that sent
    ``desc``; ``framework`` (``pytorch``, ``tensorflow``, None: the generic ``Estimator``) says
    whose: a framework's DLC image becomes ``framework_version`` and ``py_version`` again, and
    TensorFlow's ``model_dir`` hyperparameter its ``model_dir``."""
    kwargs = _generic_arguments(desc)
    if framework is None:
        return kwargs
    match = image_uris.DLC_TAG.match(kwargs.get("image_uri") or "")
    if match and match.group("repository") == f"{framework}-training":
        kwargs["framework_version"] = match.group("version")
        kwargs["py_version"] = match.group("py")
        kwargs["image_uri"] = None
    if framework == "tensorflow":
        hyperparameters = dict(kwargs.get("hyperparameters") or {})
        kwargs["model_dir"] = hyperparameters.pop("model_dir", None) or False
        kwargs["hyperparameters"] = hyperparameters
    return kwargs


def _generic_arguments(desc: Mapping[str, Any]) -> dict[str, Any]:
    """What every estimator's request carries: resources, stopping, output, the script-mode and
    distribution hyperparameters, and the user's own."""
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
        ]
        or None,
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
            tensorboard["S3OutputPath"], tensorboard.get("LocalPath")
        )

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
        key: value
        for key, value in decoded.items()
        if key not in script_keys
        and key not in DISTRIBUTION_KEYS
        and not key.startswith(contract.FRAMEWORK_PARAM_PREFIX)
    }
    return kwargs
