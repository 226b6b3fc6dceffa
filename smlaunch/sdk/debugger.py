"""``TensorBoardOutputConfig``: SDK v2's ``sagemaker.debugger.TensorBoardOutputConfig``.

``Estimator(tensorboard_output_config=TensorBoardOutputConfig(s3_output_path, container_local_output_path))``
sends ``TensorBoardOutputConfig: {"S3OutputPath", "LocalPath"?}`` in CreateTrainingJob. The training
script writes its event files to ``LocalPath`` (default ``/opt/ml/output/tensorboard``) and the
platform uploads them to ``S3OutputPath`` *as given*, while the job runs: no job name is appended
(AWS's TensorBoard guide builds ``<output_path>/<job name>/tensorboard`` into ``s3_output_path``
itself), so jobs sharing one ``s3_output_path`` share one prefix.

Checks here (the SDK does none): ``s3_output_path`` is a non-empty string and
``container_local_output_path`` an absolute path. Which URI schemes and local paths a run accepts is
decided by the estimator (``file://`` for local runs only) and by each backend's ``check``.
"""

from __future__ import annotations

from smlaunch.sdk.errors import ConfigurationError


class TensorBoardOutputConfig:
    """Where TensorBoard event files are written on each host and where they are uploaded."""

    def __init__(self, s3_output_path: str, container_local_output_path: str | None = None) -> None:
        if not isinstance(s3_output_path, str) or not s3_output_path:
            raise ConfigurationError(
                "tensorboard_output_config.s3_output_path",
                s3_output_path,
                "must be a URI string",
                "pass e.g. 's3://my-bucket/my-job/tensorboard'",
            )
        local_path = container_local_output_path
        if local_path is not None and (not isinstance(local_path, str) or not local_path.startswith("/")):
            raise ConfigurationError(
                "tensorboard_output_config.container_local_output_path",
                container_local_output_path,
                "must be an absolute path",
                "pass e.g. '/opt/ml/output/tensorboard', or leave it unset",
            )
        self.s3_output_path = s3_output_path
        self.container_local_output_path = container_local_output_path

    def _to_request_dict(self) -> dict[str, str]:
        """The request fragment, as the SDK builds it: ``LocalPath`` only when given."""
        request = {"S3OutputPath": self.s3_output_path}
        if self.container_local_output_path is not None:
            request["LocalPath"] = self.container_local_output_path
        return request

    def __repr__(self) -> str:
        return f"TensorBoardOutputConfig({self.s3_output_path!r}, {self.container_local_output_path!r})"
