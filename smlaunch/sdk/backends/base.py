"""The interface every backend implements, and the capabilities it declares as data.

A backend is one small class per place a job can run (this machine, Docker, SageMaker). It takes its
client (boto3, Docker) in its constructor so tests inject fakes or moto-backed clients. It receives a
:class:`~smlaunch.sdk.request.spec.JobRequest`: the finished
:class:`~smlaunch.sdk.request.spec.TrainingJobSpec` (its code staged by the time of ``submit``)
with what the estimator knew beside the wire, the :class:`~smlaunch.contract.strategy.Strategy`,
so that no backend decodes wire hyperparameters to learn it. It never validates user arguments
itself beyond :meth:`Backend.check`, which compares the request with the backend's declared
:class:`Capabilities` so that an unsupported option fails before anything starts.

Contract of the four operations (they mirror SageMaker's API, so the SageMaker backend is a thin
shim and the local ones are emulations):

- ``reserve(spec)`` / ``release(spec)``: claim the job's name atomically before anything is staged
  (so two submitters of one name never stage over each other), and give it back when staging or
  submitting failed. No-ops where the service itself is the arbiter (SageMaker).
- ``submit(request)``: start the job and return at once (CreateTrainingJob).
- ``describe(job_name)``: a dict with DescribeTrainingJob's shape: at least ``TrainingJobName``,
  ``TrainingJobStatus``, ``SecondaryStatus``, ``SecondaryStatusTransitions``, ``FailureReason``
  (when Failed), ``ModelArtifacts.S3ModelArtifacts``, ``TrainingStartTime``/``TrainingEndTime``,
  ``HyperParameters``, ``AlgorithmSpecification``, ``ResourceConfig``, ``OutputDataConfig``.
- ``log_lines(job_name, follow)``: the job's log lines, each already prefixed with its host
  (``[algo-2/rank 5] ...``); with ``follow`` the iterator ends only once the job is terminal and
  every line has been yielded.
- ``stop(job_name)``: ask the job to stop (StopTrainingJob); returns without waiting.
- ``metric_records(job_name, metric_names)``: every value of the job's metrics with its time and host
  (local: recorded as lines arrive; SageMaker: CloudWatch metrics, else its logs).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict

from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.errors import ConfigurationError, UnsupportedByBackendError
from smlaunch.sdk.jobs.metrics import MetricParser, MetricRecord
from smlaunch.sdk.request.spec import Channel, JobRequest, TrainingJobSpec


class Capabilities(BaseModel):
    """What a backend can honour. Checked against the spec before anything is staged."""

    model_config = ConfigDict(frozen=True)

    name: str
    uri_schemes: frozenset[str]
    """URI schemes accepted for code, inputs, output and checkpoints (``s3``, ``file``)."""
    input_modes: frozenset[str] = frozenset({"File"})
    distributions: frozenset[Strategy] = frozenset(Strategy)
    """Launch strategies (what :attr:`Distribution.strategy` gives; ``none`` is a plain process)."""
    max_instance_count: int | None = None
    spot: bool = False
    checkpoints: bool = False
    vpc: bool = False
    network_isolation: bool = False
    retry_strategy: bool = False
    """``max_retry_attempts`` (``RetryStrategy``) is accepted; what a retry means is the backend's."""
    spot_interruptions: bool = False
    """``stop(job, reason="spot")`` interrupts the job, which then resumes on fresh hosts."""
    interrupt_stops_job: bool = True
    """Ctrl-C while waiting stops the job (local backends) or only the waiting (SageMaker)."""


def _check_compression(channel: Channel, mode: str) -> None:
    """``CompressionType: Gzip`` only in Pipe mode, as SageMaker rules: "CompressionType is used only
    in Pipe input mode. In File mode, leave this field unset or set it to None" (API reference);
    CreateTrainingJob refuses it otherwise ("File mode only supports NONE, got Gzip instead"). FastFile
    mounts the objects as stored, so it is refused there too. Not a backend limitation: every backend
    raises it, before SageMaker would."""
    if channel.CompressionType in (None, "None") or mode == "Pipe":
        return
    raise ConfigurationError(
        f"inputs[{channel.ChannelName!r}].compression",
        channel.CompressionType,
        f"SageMaker decompresses channels in Pipe mode only; this channel is in {mode} mode",
        "pass input_mode='Pipe' (on the TrainingInput or the estimator) to stream it decompressed, or "
        "drop compression and have the script read the .gz files itself",
    )


def output_prefix(output_path: str, job_name: str) -> str:
    """``<output_path>/<job>/output`` with exactly one slash between the parts."""
    return f"{output_path.rstrip('/')}/{job_name}/output"


def refuse_earlier_output(spec: TrainingJobSpec, s3_client: Callable[[], Any]) -> None:
    """Refuse a job whose ``<output_path>/<job>/output/`` already holds objects (a job of the same
    name from another job store or region, or one whose record was removed): delivering this job's
    artifacts would overwrite them. A prefix that cannot be listed (no bucket yet, no credentials)
    shows nothing to protect; the job's own upload reports such S3 problems."""
    from botocore.exceptions import BotoCoreError, ClientError

    from smlaunch.contract.transfer.engine import TransferEngine

    output = spec.OutputDataConfig.S3OutputPath
    prefix = output_prefix(output, spec.TrainingJobName) + "/"
    try:
        existing = TransferEngine(client_factory=s3_client, progress=False).list(prefix)
    except (ClientError, BotoCoreError, OSError):
        existing = []
    if existing:
        raise ConfigurationError(
            "output_path",
            output,
            f"{existing[0].uri} already exists (an earlier job named {spec.TrainingJobName!r}); this "
            "job's artifacts would overwrite it",
            "pass another job_name (or leave it unset for a fresh timestamped name), another "
            f"output_path, or move {prefix} away first",
        )


class Backend(ABC):
    """One place a job can run. Subclasses set ``capabilities`` and implement the four operations."""

    capabilities: Capabilities
    """What this backend supports (a class attribute; an instance may narrow it, e.g. by executor)."""

    def check(self, request: JobRequest) -> None:
        """Raise :class:`UnsupportedByBackendError` for anything in ``request`` this backend cannot do."""
        spec, strategy = request.spec, request.strategy
        caps = self.capabilities
        name = caps.name

        def refuse(field: str, value: object, problem: str, fix: str) -> None:
            raise UnsupportedByBackendError(field, value, f"{problem} on the {name} backend", fix)

        count = spec.ResourceConfig.InstanceCount
        if caps.max_instance_count is not None and count > caps.max_instance_count:
            refuse(
                "instance_count",
                count,
                f"at most {caps.max_instance_count} supported",
                f"use instance_count <= {caps.max_instance_count} or another backend",
            )
        if strategy not in caps.distributions:
            refuse(
                "distribution",
                strategy.value,
                "distribution strategy not supported",
                f"use one of {sorted(s.value for s in caps.distributions)} or another backend",
            )
        job_mode = spec.AlgorithmSpecification.TrainingInputMode
        if job_mode not in caps.input_modes:
            refuse(
                "input_mode", job_mode, "input mode not supported", f"use one of {sorted(caps.input_modes)}"
            )
        uris: list[tuple[str, str]] = [("output_path", spec.OutputDataConfig.S3OutputPath)]
        for channel in spec.InputDataConfig or []:
            if channel.DataSource.S3DataSource is not None:
                uris.append((f"inputs[{channel.ChannelName!r}]", channel.DataSource.S3DataSource.S3Uri))
            mode = channel.InputMode or spec.AlgorithmSpecification.TrainingInputMode
            if mode not in caps.input_modes:
                refuse(
                    f"inputs[{channel.ChannelName!r}].input_mode",
                    mode,
                    "input mode not supported",
                    f"use one of {sorted(caps.input_modes)}",
                )
            _check_compression(channel, mode)
        if spec.CheckpointConfig is not None:
            if not caps.checkpoints:
                refuse(
                    "checkpoint_s3_uri",
                    spec.CheckpointConfig.S3Uri,
                    "checkpoints not supported",
                    "drop checkpoint_s3_uri or use another backend",
                )
            uris.append(("checkpoint_s3_uri", spec.CheckpointConfig.S3Uri))
        if spec.TensorBoardOutputConfig is not None:
            tensorboard = spec.TensorBoardOutputConfig.S3OutputPath
            uris.append(("tensorboard_output_config.s3_output_path", tensorboard))
        for field, uri in uris:
            scheme = urlparse(uri).scheme
            if scheme not in caps.uri_schemes:
                refuse(
                    field,
                    uri,
                    f"{scheme or 'a scheme-less'}:// URIs are not supported",
                    f"use a URI starting with one of {sorted(s + '://' for s in caps.uri_schemes)}",
                )
        if spec.EnableManagedSpotTraining and not caps.spot:
            refuse("use_spot_instances", True, "spot training not supported", "drop use_spot_instances")
        if spec.VpcConfig is not None and not caps.vpc:
            refuse(
                "subnets",
                spec.VpcConfig.Subnets,
                "VPC configuration not supported",
                "drop subnets and security_group_ids",
            )
        if spec.EnableNetworkIsolation and not caps.network_isolation:
            refuse(
                "enable_network_isolation",
                True,
                "network isolation not supported",
                "drop enable_network_isolation",
            )
        if spec.RetryStrategy is not None and not caps.retry_strategy:
            refuse(
                "max_retry_attempts",
                spec.RetryStrategy.MaximumRetryAttempts,
                "retrying a job (RetryStrategy) is not supported",
                "drop max_retry_attempts, or use another backend",
            )

    def reserve(self, spec: TrainingJobSpec) -> None:
        """Claim ``spec.TrainingJobName`` before anything is staged, or raise
        :class:`~smlaunch.sdk.errors.JobNameTakenError`. Default: nothing to claim."""
        return None

    def release(self, spec: TrainingJobSpec) -> None:
        """Give back a name :meth:`reserve` claimed when the job was not submitted after all, leaving
        nothing of it behind. Default: nothing to give back."""
        return None

    @abstractmethod
    def submit(self, request: JobRequest) -> None:
        """Start the job described by ``request`` and return without waiting."""

    @abstractmethod
    def describe(self, job_name: str) -> dict[str, Any]:
        """The job's state, with DescribeTrainingJob's shape."""

    @abstractmethod
    def log_lines(self, job_name: str, follow: bool = False) -> Iterator[str]:
        """The job's log lines, host-prefixed; with ``follow``, until the job has ended."""

    def log_blocks(self, job_name: str, follow: bool = False) -> Iterator[list[str]]:
        """:meth:`log_lines` in lists, as many as are at hand at once (a follower prints each list
        with one write); this default gives one line per list."""
        for line in self.log_lines(job_name, follow):
            yield [line]

    def metric_records(self, job_name: str, metric_names: Sequence[str] | None = None) -> list[MetricRecord]:
        """Values of the job's ``MetricDefinitions`` (only ``metric_names`` when given), with the time
        and host of each where the backend knows them. This default scrapes :meth:`log_lines`, which
        carry no times; backends override it with a timed source."""
        definitions = (self.describe(job_name).get("AlgorithmSpecification") or {}).get("MetricDefinitions")
        parser = MetricParser([d for d in definitions or [] if not metric_names or d["Name"] in metric_names])
        return [MetricRecord(s.name, s.value, None, s.host) for s in parser.parse(self.log_lines(job_name))]

    @abstractmethod
    def stop(self, job_name: str, reason: str | None = None) -> None:
        """Ask the job to stop; the job ends Stopped. ``reason="spot"`` instead emulates a spot
        interruption where the backend emulates managed spot (``capabilities.spot_interruptions``)."""
