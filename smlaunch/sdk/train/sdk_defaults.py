"""SDK v3's "intelligent defaults" for ``ModelTrainer``: what its ``config.yaml`` fills in.

The files are the SDK's (:mod:`smlaunch.sdk.request.sdk_config` reads them into the session's
``sagemaker_config``); this module settles which keys a ``ModelTrainer`` takes from them, as SDK
v3 (3.27.0, ``ModelTrainer._populate_intelligent_defaults`` and the role resolver) does for a
SageMaker training job. An argument given explicitly always wins.

| key                                                             | fills, when left out           |
|-----------------------------------------------------------------|--------------------------------|
| ``SageMaker.PythonSDK.Modules.ModelTrainer.sourceCode``         | ``source_code``                |
| ``SageMaker.PythonSDK.Modules.ModelTrainer.networking``         | ``networking``                 |
| ``SageMaker.PythonSDK.Modules.ModelTrainer.checkpointConfig``   | ``checkpoint_config``          |
| ``SageMaker.PythonSDK.Modules.ModelTrainer.inputS3KeyPrefix``   | ``input_s3_key_prefix``        |
| ``SageMaker.TrainingJob.EnableNetworkIsolation``                | ``networking``'s               |
|                                                                 | ``enable_network_isolation``   |
| ``SageMaker.TrainingJob.Environment``                           | ``environment`` (the whole map)|
| ``SageMaker.TrainingJob.RoleArn``                               | ``role``                       |

The ``ModelTrainer`` keys are the argument's name in lowerCamelCase (v3's ``to_camel_case``:
``sourceCode``, not ``SourceCode``, which v3 never reads); their mappings hold the config class's
fields (``snake_case``, as v3 passes them to the class) and win over the ``TrainingJob`` keys. What
v3 does *not* take, and neither does smlaunch: the other ``ModelTrainer`` keys (v3 fills ``role``,
``compute``, ``stopping_condition``, ``base_job_name``, ``output_data_config``, ``environment``,
``hyperparameters`` and ``training_input_mode`` with its own defaults first), ``TrainingJob.Tags``,
``OutputDataConfig`` and ``ResourceConfig``, and ``TrainingJob.VpcConfig``'s subnets and security
groups (v3 reads them without its session, so it finds none; a ``VpcConfig`` alone, as there,
yields a ``Networking`` with nothing set). ``RoleArn`` is what v3's role resolver takes before the
caller's own identity (which smlaunch does not guess: without either, the role is required).
``algorithmName`` and ``trainingImageConfig``, which v3 would take, are refused by name, as the
arguments are. A ``sourceCode`` from the config is checked at construction, as an argument is (v3 takes it at
``train()``, unchecked).

As for the estimators, a local session (or a Slurm or Kubernetes one) takes ``Environment`` only:
the other keys configure SageMaker's AWS side (VPC, IAM, S3 prefixes and checkpoints).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import sdk_config
from smlaunch.sdk.train import configs, validation

MODEL_TRAINER = "SageMaker.PythonSDK.Modules.ModelTrainer"
ENVIRONMENT = "SageMaker.TrainingJob.Environment"
NETWORK_ISOLATION = "SageMaker.TrainingJob.EnableNetworkIsolation"
VPC_CONFIG = "SageMaker.TrainingJob.VpcConfig"
ROLE_ARN = "SageMaker.TrainingJob.RoleArn"
UNSUPPORTED = ("algorithmName", "trainingImageConfig")
"""``ModelTrainer`` keys v3 would take, for arguments smlaunch refuses."""
_CONFIG_CLASSES: dict[str, type[Any]] = {
    "source_code": configs.SourceCode,
    "networking": configs.Networking,
    "checkpoint_config": configs.CheckpointConfig,
}
_CAMEL = {
    "source_code": "sourceCode",
    "networking": "networking",
    "checkpoint_config": "checkpointConfig",
    "input_s3_key_prefix": "inputS3KeyPrefix",
}


def _model_trainer_value(config: Mapping[str, Any], argument: str) -> Any:
    path = f"{MODEL_TRAINER}.{_CAMEL[argument]}"
    found = sdk_config.value(config, path)
    if found is None:
        return None
    field = f"config.yaml {path}"
    kind = _CONFIG_CLASSES.get(argument)
    if kind is None:
        if not isinstance(found, str):
            raise ConfigurationError(field, found, "must be a string", "write a string")
        return found
    if not isinstance(found, Mapping):
        raise ConfigurationError(
            field, found, f"must be a mapping of {kind.__name__}'s fields", f"see {kind.__name__}'s fields"
        )
    return validation.config(field, found, kind)


def resolve(config: Mapping[str, Any] | None, is_local: bool, **arguments: Any) -> dict[str, Any]:
    """``arguments`` (``source_code``, ``networking``, ``checkpoint_config``,
    ``input_s3_key_prefix``, ``environment``, ``role``; ``None`` or empty is "not given") with what
    the config fills in (see the module table)."""
    resolved = dict(arguments)
    config = config or {}
    if not resolved.get("environment"):
        resolved["environment"] = sdk_config.value(config, ENVIRONMENT) or resolved.get("environment")
    if is_local:
        return resolved
    for key in UNSUPPORTED:
        found = sdk_config.value(config, f"{MODEL_TRAINER}.{key}")
        if found is not None:
            raise ConfigurationError(
                f"config.yaml {MODEL_TRAINER}.{key}",
                found,
                "is not supported by smlaunch (v3 would send it)",
                "remove it from the config file",
            )
    for argument in _CAMEL:
        if resolved.get(argument) is None:
            resolved[argument] = _model_trainer_value(config, argument)
    isolation = sdk_config.value(config, NETWORK_ISOLATION)
    networking = validation.config("networking", resolved.get("networking"), configs.Networking)
    if networking is None:
        if isolation is not None or sdk_config.value(config, VPC_CONFIG) is not None:
            networking = configs.Networking(enable_network_isolation=isolation)
    elif networking.enable_network_isolation is None and isolation is not None:
        networking = networking.model_copy(update={"enable_network_isolation": isolation})
    resolved["networking"] = networking
    if not resolved.get("role"):
        resolved["role"] = sdk_config.value(config, ROLE_ARN) or resolved.get("role")
    return resolved
