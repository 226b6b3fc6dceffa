"""A received CreateTrainingJob made into the job request the SDK's backends take.

The request is the SageMaker SDK's wire, so it becomes a
:class:`~smlaunch.sdk.request.spec.TrainingJobSpec` as it is, and the distribution's strategy is read
back from its hyperparameters as ``attach`` reads it. What the server must not do for a remote
client is checked here too: every URI of the request (code, channels, output, checkpoints) must be
``s3://``, as the service's model says (its patterns refuse ``file://`` for the members it
constrains; the code's URI, a hyperparameter, is checked here), so a request never names a path on
the server's own disk.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pydantic

from smlaunch import contract
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request.distribution import Distribution
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec
from smlaunch.serve.wire import validation_error


def job_request(request: dict[str, Any]) -> JobRequest:
    """The backend's request for a received CreateTrainingJob; ``ValidationException`` for a member
    smlaunch does not run, or a URI that is not ``s3://``."""
    try:
        spec = TrainingJobSpec.model_validate(request)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        if first["type"] == "extra_forbidden":
            raise validation_error(
                f"{where} is not supported by smlaunch serve (docs/serve.md lists what is); "
                "leave it out of the request"
            ) from None
        raise validation_error(f"{where}: {first['msg']}") from None
    for field, uri in _uris(spec):
        _check_s3(field, uri)
    try:
        strategy = Distribution.from_hyperparameters(hp.decode(spec.HyperParameters)).strategy
    except (ConfigurationError, ValueError) as exc:
        raise validation_error(f"HyperParameters: {exc}") from None
    return JobRequest(spec, strategy)


def _uris(spec: TrainingJobSpec) -> list[tuple[str, str]]:
    uris = [("OutputDataConfig.S3OutputPath", spec.OutputDataConfig.S3OutputPath)]
    for channel in spec.InputDataConfig or []:
        if channel.DataSource.S3DataSource is not None:
            uris.append(
                (f"InputDataConfig[{channel.ChannelName}].S3Uri", channel.DataSource.S3DataSource.S3Uri)
            )
    if spec.CheckpointConfig is not None:
        uris.append(("CheckpointConfig.S3Uri", spec.CheckpointConfig.S3Uri))
    if spec.TensorBoardOutputConfig is not None:
        uris.append(("TensorBoardOutputConfig.S3OutputPath", spec.TensorBoardOutputConfig.S3OutputPath))
    if spec.DebugHookConfig is not None:
        uris.append(("DebugHookConfig.S3OutputPath", spec.DebugHookConfig.S3OutputPath))
    submit = (spec.HyperParameters or {}).get(contract.HP_SUBMIT_DIRECTORY)
    if submit is not None:
        uris.append((f"HyperParameters.{contract.HP_SUBMIT_DIRECTORY}", str(hp.decode_value(submit))))
    return uris


def _check_s3(field: str, uri: str) -> None:
    if urlparse(uri).scheme != "s3":
        raise validation_error(
            f"{field}: '{uri}' is not an s3:// URI (the server reads code and data from S3 only, "
            "never from a path on its own disk)"
        )
