"""The job spec: one pydantic model with the shape of SageMaker's CreateTrainingJob request.

Plain data, no behaviour and no I/O (TorchX's ``AppDef`` split). Field names are the API's own
PascalCase names, so ``spec.to_request()`` is exactly the keyword arguments of
``sagemaker_client.create_training_job(**request)``, and a dry run can print what would be sent.
Every backend consumes this one model: the SageMaker backend sends it, the local and Docker
backends emulate it. It reaches them in a :class:`JobRequest`, beside what the estimator knew
that the wire carries only encoded (the distribution's strategy), so no backend decodes it back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from smlaunch.contract.strategy import Strategy

InputMode = Literal["File", "FastFile", "Pipe"]
S3DataType = Literal["S3Prefix", "ManifestFile", "AugmentedManifestFile"]
S3DataDistributionType = Literal["FullyReplicated", "ShardedByS3Key"]
# Aliases for annotations of fields named like their type (pydantic resolves a field's annotation
# in the class namespace, where the field's own default would shadow the type).
_InputMode = InputMode
_S3DataType = S3DataType
_S3DataDistributionType = S3DataDistributionType


class _Wire(BaseModel):
    """Base for request fragments: forbid unknown keys so a typo cannot reach the wire."""

    model_config = ConfigDict(extra="forbid")


class MetricDefinition(_Wire):
    Name: str
    Regex: str


class AlgorithmSpecification(_Wire):
    TrainingInputMode: InputMode = "File"
    TrainingImage: str | None = None
    AlgorithmName: str | None = None
    MetricDefinitions: list[MetricDefinition] | None = None
    EnableSageMakerMetricsTimeSeries: bool | None = None
    ContainerEntrypoint: list[str] | None = None
    """Set by ModelTrainer (SDK v3) jobs: ``/bin/bash`` running their drivers' ``sm_train.sh``."""
    ContainerArguments: list[str] | None = None


class S3DataSource(_Wire):
    S3DataType: _S3DataType = "S3Prefix"
    S3Uri: str
    S3DataDistributionType: _S3DataDistributionType = "FullyReplicated"
    AttributeNames: list[str] | None = None


_S3DataSource = S3DataSource


class FileSystemDataSource(_Wire):
    FileSystemId: str
    FileSystemAccessMode: Literal["rw", "ro"]
    FileSystemType: Literal["EFS", "FSxLustre"]
    DirectoryPath: str


_FileSystemDataSource = FileSystemDataSource


class DataSource(_Wire):
    S3DataSource: _S3DataSource | None = None
    FileSystemDataSource: _FileSystemDataSource | None = None


class ShuffleConfig(_Wire):
    Seed: int


_ShuffleConfig = ShuffleConfig


class Channel(_Wire):
    ChannelName: str
    DataSource: DataSource
    ContentType: str | None = None
    CompressionType: Literal["None", "Gzip"] | None = None
    RecordWrapperType: Literal["None", "RecordIO"] | None = None
    InputMode: _InputMode | None = None
    ShuffleConfig: _ShuffleConfig | None = None


class OutputDataConfig(_Wire):
    S3OutputPath: str
    KmsKeyId: str | None = None
    CompressionType: Literal["GZIP", "NONE"] | None = None


class ResourceConfig(_Wire):
    InstanceType: str
    InstanceCount: int = Field(ge=1)
    VolumeSizeInGB: int = Field(default=30, ge=1)
    VolumeKmsKeyId: str | None = None
    KeepAlivePeriodInSeconds: int | None = None


class StoppingCondition(_Wire):
    MaxRuntimeInSeconds: int = Field(default=86400, ge=1)
    MaxWaitTimeInSeconds: int | None = Field(default=None, ge=1)
    MaxPendingTimeInSeconds: int | None = Field(default=None, ge=1)


_StoppingCondition = StoppingCondition


class CheckpointConfig(_Wire):
    S3Uri: str
    LocalPath: str | None = None


_CheckpointConfig = CheckpointConfig


class VpcConfig(_Wire):
    SecurityGroupIds: list[str]
    Subnets: list[str]


_VpcConfig = VpcConfig


class RetryStrategy(_Wire):
    MaximumRetryAttempts: int = Field(ge=1, le=30)


_RetryStrategy = RetryStrategy


class Tag(_Wire):
    Key: str
    Value: str


class DebugHookConfig(_Wire):
    S3OutputPath: str
    LocalPath: str | None = None
    CollectionConfigurations: list[dict[str, Any]] = Field(default_factory=list)


_DebugHookConfig = DebugHookConfig


class TensorBoardOutputConfig(_Wire):
    S3OutputPath: str
    LocalPath: str | None = None


_TensorBoardOutputConfig = TensorBoardOutputConfig


class ProfilerConfig(_Wire):
    S3OutputPath: str | None = None
    DisableProfiler: bool = False


_ProfilerConfig = ProfilerConfig


class ExperimentConfig(_Wire):
    """Which SageMaker Experiments run the job belongs to (``fit(experiment_config=...)``)."""

    ExperimentName: str | None = None
    TrialName: str | None = None
    TrialComponentDisplayName: str | None = None
    RunName: str | None = None


_ExperimentConfig = ExperimentConfig


class WireRequest(_Wire):
    """A whole API request (``create_training_job``, ``create_hyper_parameter_tuning_job``): what a
    ``plan()`` returns, printed as the JSON that would be sent."""

    def to_request(self) -> dict[str, Any]:
        """The operation's keyword arguments: unset (None) fields are left out."""
        return self.model_dump(exclude_none=True)

    def __str__(self) -> str:
        """The request as indented JSON, so ``print(est.plan())`` shows what would be sent."""
        return json.dumps(self.to_request(), indent=2)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython and Jupyter show a ``plan()`` as that JSON too."""
        printer.text(str(self))


class TrainingJobSpec(WireRequest):
    """CreateTrainingJob, field for field. ``HyperParameters`` values are already wire strings."""

    TrainingJobName: str
    AlgorithmSpecification: AlgorithmSpecification
    RoleArn: str
    OutputDataConfig: OutputDataConfig
    ResourceConfig: ResourceConfig
    StoppingCondition: _StoppingCondition = Field(default_factory=StoppingCondition)
    HyperParameters: dict[str, str] = Field(default_factory=dict)
    InputDataConfig: list[Channel] | None = None
    CheckpointConfig: _CheckpointConfig | None = None
    Environment: dict[str, str] | None = None
    VpcConfig: _VpcConfig | None = None
    EnableNetworkIsolation: bool | None = None
    EnableInterContainerTrafficEncryption: bool | None = None
    EnableManagedSpotTraining: bool | None = None
    RetryStrategy: _RetryStrategy | None = None
    Tags: list[Tag] | None = None
    DebugHookConfig: _DebugHookConfig | None = None
    ProfilerConfig: _ProfilerConfig | None = None
    TensorBoardOutputConfig: _TensorBoardOutputConfig | None = None
    ExperimentConfig: _ExperimentConfig | None = None

    def channel(self, name: str) -> Channel | None:
        """The input channel called ``name``, or None."""
        for channel in self.InputDataConfig or []:
            if channel.ChannelName == name:
                return channel
        return None

    def data_uris(self) -> list[tuple[str, str]]:
        """Every place the job reads or writes data, each with the estimator argument that names it:
        ``output_path``, ``inputs['<channel>']`` (S3 data sources), ``checkpoint_s3_uri`` and
        ``tensorboard_output_config.s3_output_path``. For checks that a platform can reach them."""
        uris = [("output_path", self.OutputDataConfig.S3OutputPath)]
        uris += [
            (f"inputs[{c.ChannelName!r}]", c.DataSource.S3DataSource.S3Uri)
            for c in self.InputDataConfig or []
            if c.DataSource.S3DataSource is not None
        ]
        if self.CheckpointConfig is not None:
            uris.append(("checkpoint_s3_uri", self.CheckpointConfig.S3Uri))
        if self.TensorBoardOutputConfig is not None:
            tensorboard = self.TensorBoardOutputConfig.S3OutputPath
            uris.append(("tensorboard_output_config.s3_output_path", tensorboard))
        return uris


@dataclass(frozen=True)
class JobRequest:
    """One job as the notebook hands it to a backend's ``check`` and ``submit``: the wire request,
    and the strategy the estimator's ``distribution`` selects (``spec.HyperParameters`` carries it
    encoded, for the hosts)."""

    spec: TrainingJobSpec
    strategy: Strategy
