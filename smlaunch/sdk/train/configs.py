"""SDK v3's configuration classes (``sagemaker.train.configs``), field for field: plain pydantic
models that :class:`~smlaunch.sdk.train.model_trainer.ModelTrainer` turns into the request.

Names, fields and defaults are v3's (``sagemaker.core.training.configs`` and the
``sagemaker.core.shapes`` it re-exports). As there, unknown fields are refused and assignments are
validated, so a typo fails where it is written. Fields of v3's shapes that smlaunch does not send
(``instance_preferences``, ``instance_placement_config``, ``hub_access_config``, ...) are left out,
so passing one fails by its name rather than being dropped.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class BaseConfig(BaseModel):
    """Base of every config: unknown fields refused, assignments validated (as v3's)."""

    model_config = ConfigDict(validate_assignment=True, extra="forbid")


class SourceCode(BaseConfig):
    """The code the job runs: ``source_dir`` (a local directory or an ``s3://`` prefix), the
    ``entry_script`` in it or a ``command`` (with ``args``), and its ``requirements`` file."""

    source_dir: str | None = None
    requirements: str | None = None
    entry_script: str | None = None
    command: str | None = None
    args: list[str | int | float] | None = None
    ignore_patterns: list[str] | None = [
        ".env",
        ".git",
        "__pycache__",
        ".DS_Store",
        ".cache",
        ".ipynb_checkpoints",
    ]


class InstanceGroup(BaseConfig):
    """A heterogeneous cluster's group (accepted by the model, refused by ``ModelTrainer``)."""

    instance_type: str
    instance_count: int
    instance_group_name: str


class Compute(BaseConfig):
    """The job's instances: ``ResourceConfig`` and ``EnableManagedSpotTraining``."""

    instance_type: str | None = None
    instance_count: int | None = None
    volume_size_in_gb: int | None = 30
    volume_kms_key_id: str | None = None
    keep_alive_period_in_seconds: int | None = None
    instance_groups: list[InstanceGroup] | None = None
    training_plan_arn: str | None = None
    enable_managed_spot_training: bool | None = None


class Networking(BaseConfig):
    """``VpcConfig``, ``EnableNetworkIsolation`` and ``EnableInterContainerTrafficEncryption``."""

    security_group_ids: list[str] | None = None
    subnets: list[str] | None = None
    enable_network_isolation: bool | None = None
    enable_inter_container_traffic_encryption: bool | None = None


class StoppingCondition(BaseConfig):
    """``StoppingCondition`` (v3's default: ``max_runtime_in_seconds=3600``)."""

    max_runtime_in_seconds: int | None = None
    max_wait_time_in_seconds: int | None = None
    max_pending_time_in_seconds: int | None = None


class RetryStrategy(BaseConfig):
    maximum_retry_attempts: int


class OutputDataConfig(BaseConfig):
    """Where the artifacts go (default ``s3://<bucket>/<base_job_name>``, ``GZIP``)."""

    s3_output_path: str | None = None
    kms_key_id: str | None = None
    compression_type: Literal["GZIP", "NONE"] | None = None


class CheckpointConfig(BaseConfig):
    """Checkpoints synced between ``local_path`` and ``s3_uri`` (default
    ``s3://<bucket>/<base_job_name>/<job>/checkpoints``)."""

    s3_uri: str | None = None
    local_path: str | None = "/opt/ml/checkpoints"


class TensorBoardOutputConfig(BaseConfig):
    """TensorBoard event files synced from ``local_path`` to ``s3_output_path``."""

    s3_output_path: str | None = None
    local_path: str | None = "/opt/ml/output/tensorboard"


class S3DataSource(BaseConfig):
    s3_data_type: Literal["S3Prefix", "ManifestFile", "AugmentedManifestFile"]
    s3_uri: str
    s3_data_distribution_type: Literal["FullyReplicated", "ShardedByS3Key"] | None = None
    attribute_names: list[str] | None = None


class FileSystemDataSource(BaseConfig):
    file_system_id: str
    file_system_access_mode: Literal["rw", "ro"]
    file_system_type: Literal["EFS", "FSxLustre"]
    directory_path: str


class DataSource(BaseConfig):
    s3_data_source: S3DataSource | None = None
    file_system_data_source: FileSystemDataSource | None = None


class ShuffleConfig(BaseConfig):
    seed: int


class Channel(BaseConfig):
    """A channel given whole (v3 sends it as it is)."""

    channel_name: str
    data_source: DataSource
    content_type: str | None = None
    compression_type: Literal["None", "Gzip"] | None = None
    record_wrapper_type: Literal["None", "RecordIO"] | None = None
    input_mode: Literal["File", "FastFile", "Pipe"] | None = None
    shuffle_config: ShuffleConfig | None = None


class InputData(BaseConfig):
    """A channel from a local path, an ``s3://`` URI, or an :class:`S3DataSource` /
    :class:`FileSystemDataSource`; found at ``/opt/ml/input/data/<channel_name>``."""

    channel_name: str
    data_source: str | S3DataSource | FileSystemDataSource
    content_type: str | None = None


class Tag(BaseConfig):
    key: str
    value: str


class MetricDefinition(BaseConfig):
    name: str
    regex: str


TrainingJobCompute = Compute

__all__ = [
    "BaseConfig",
    "Channel",
    "CheckpointConfig",
    "Compute",
    "DataSource",
    "FileSystemDataSource",
    "InputData",
    "InstanceGroup",
    "MetricDefinition",
    "Networking",
    "OutputDataConfig",
    "RetryStrategy",
    "S3DataSource",
    "ShuffleConfig",
    "SourceCode",
    "StoppingCondition",
    "Tag",
    "TensorBoardOutputConfig",
    "TrainingJobCompute",
]
