"""Amazon SageMaker as a backend: a thin shim over CreateTrainingJob, DescribeTrainingJob,
StopTrainingJob and the job's CloudWatch logs.

The spec is already the request (``spec.to_request()``), so submission adds nothing; what this module
owns is talking to the service well:

- ``describe`` retries throttling with exponential backoff and jitter (a notebook polling many jobs
  hits DescribeTrainingJob's rate limit), and turns an unknown job name into a
  :class:`ConfigurationError`;
- ``log_lines`` merges every host's CloudWatch stream (:mod:`smlaunch.sdk.backends.sagemaker.cloudwatch`),
prefixes each
  line with its host, interleaves each secondary-status transition once
  (``[sagemaker] 2026-11-22 02:27:58 Starting - Preparing the instances for training``), waits for a
  log group that does not exist yet, follows until the job is terminal, reads once more after a short
  delay so the last lines CloudWatch ingests late are not lost, and ends with training and billable
  seconds (and the spot saving) of a Completed job and one closing line
  (:func:`smlaunch.sdk.backends.status.summary_lines`);
- ``stop`` of a job that already ended is a no-op, not an error.

Ctrl-C while waiting does not stop a SageMaker job (``interrupt_stops_job=False``): the job runs and
bills in the cloud whether or not a notebook watches it; :class:`~smlaunch.sdk.jobs.job.TrainingJob` says
how to re-attach. The clock (``sleep``) is injected so tests drive a job through its states without
waiting.
"""

from __future__ import annotations

import heapq
import logging
import posixpath
import random
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from botocore.exceptions import ClientError

from smlaunch import contract
from smlaunch.sdk.backends.base import Backend, Capabilities, refuse_earlier_output
from smlaunch.sdk.backends.sagemaker.cloudwatch import LogEvent, LogStreamMerger
from smlaunch.sdk.backends.sagemaker.credentials import aws_errors
from smlaunch.sdk.backends.status import StatusTracker, instance_count, summary_lines
from smlaunch.sdk.errors import ConfigurationError, JobNameTakenError
from smlaunch.sdk.jobs.metrics import SERVICE_SOURCE, MetricParser, MetricRecord
from smlaunch.sdk.request import hyperparameters as hp
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec

logger = logging.getLogger(__name__)

METRICS_NAMESPACE = "/aws/sagemaker/TrainingJobs"
"""CloudWatch namespace of training-job metrics (dimension ``TrainingJobName``)."""
METRICS_PERIOD_SECONDS = 60
"""Aggregation period of the datapoints read, the SDK's ``METRICS_PERIOD_DEFAULT``."""


THROTTLING_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "ProvisionedThroughputExceededException",
    }
)


def _error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


CLAIM_OBJECT = ".smlaunch-claim"
"""Empty object written beside ``sourcedir.tar.gz`` by :meth:`SageMakerBackend.reserve`."""


def _claim_location(spec: TrainingJobSpec) -> tuple[str, str] | None:
    """(bucket, key) of the name claim: beside the staged code when it lives under ``<job>/source/``;
    None when the code is the user's own ``s3://`` archive, which nothing stages over."""
    raw = (spec.HyperParameters or {}).get(contract.HP_SUBMIT_DIRECTORY)
    if not raw:
        return None
    uri = hp.decode_value(raw)
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        return None
    bucket, _, key = uri[len("s3://") :].partition("/")
    source = posixpath.dirname(key)
    job_dir = posixpath.dirname(source)
    if posixpath.basename(source) != "source" or posixpath.basename(job_dir) != spec.TrainingJobName:
        return None
    return bucket, posixpath.join(source, CLAIM_OBJECT)


def _job_not_found(error: ClientError) -> bool:
    """DescribeTrainingJob's answer for a name that has no job (a ValidationException)."""
    message = _error_message(error).lower()
    return _error_code(error) == "ValidationException" and ("not find" in message or "not found" in message)


def _error_message(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Message", ""))


class SageMakerClients(Protocol):
    """What the backend reads of its session (:class:`smlaunch.sdk.sessions.sagemaker.Session`):
    the region and its boto3 clients, so that the backend never imports the session."""

    @property
    def region_name(self) -> str: ...

    def sagemaker_client(self) -> Any: ...

    def s3_client(self) -> Any: ...

    def logs_client(self) -> Any: ...

    def cloudwatch_client(self) -> Any: ...

    def bucket_owner_args(self, bucket: str) -> dict[str, str]: ...


class SageMakerBackend(Backend):
    """Jobs on Amazon SageMaker, through the session's boto3 clients.

    ``poll_seconds``: first delay between polls while following; it grows 1.5x per quiet poll up to
    ``max_poll_seconds`` and falls back when lines arrive. ``final_flush_seconds``: the wait, after the
    job ended, before the last read of its logs. ``sleep``: the clock (tests inject one that advances a
    moto-backed job). ``describe_attempts``: tries of DescribeTrainingJob under throttling.
    ``streams_page_size``/``events_page_size``: CloudWatch page sizes (tests make them small).
    """

    capabilities = Capabilities(
        name="sagemaker",
        uri_schemes=frozenset({"s3"}),
        input_modes=frozenset({"File", "FastFile", "Pipe"}),
        spot=True,
        checkpoints=True,
        vpc=True,
        network_isolation=True,
        retry_strategy=True,
        interrupt_stops_job=False,
    )

    def __init__(
        self,
        session: SageMakerClients,
        poll_seconds: float = 5.0,
        max_poll_seconds: float = 30.0,
        final_flush_seconds: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        describe_attempts: int = 8,
        streams_page_size: int = 50,
        events_page_size: int | None = None,
    ) -> None:
        self.session = session
        self.poll_seconds = poll_seconds
        self.max_poll_seconds = max_poll_seconds
        self.final_flush_seconds = final_flush_seconds
        self.sleep = sleep
        self.describe_attempts = describe_attempts
        self.streams_page_size = streams_page_size
        self.events_page_size = events_page_size

    # -- the four operations

    def check(self, request: JobRequest) -> None:
        """Capabilities, and no earlier artifacts at ``<output_path>/<job>/output/``: job names are
        unique per account and region only, and SageMaker would overwrite them."""
        super().check(request)
        refuse_earlier_output(request.spec, self.session.s3_client)

    def reserve(self, spec: TrainingJobSpec) -> None:
        """Claim the job's name before any code is staged.

        First a name SageMaker already has is refused: re-running ``fit`` with a finished job's name
        would otherwise overwrite that job's ``<job>/source/sourcedir.tar.gz`` and only then be
        refused by CreateTrainingJob. Then, when the code is staged under ``<job>/source/``, an
        empty claim object (:data:`CLAIM_OBJECT`) is written beside it with S3's conditional write
        (``If-None-Match: *``): of two submitters racing past the first check at the same moment,
        exactly one writes it, and the other is refused before it stages anything, so the accepted
        job always runs its own code. The claim stays after a successful submit (removing it would
        reopen the race for a submitter still between the two checks); :meth:`release` removes it
        when the job was not submitted after all."""
        name = spec.TrainingJobName
        try:
            with aws_errors(f"look up the training job name {name}"):
                self.session.sagemaker_client().describe_training_job(TrainingJobName=name)
        except ClientError as error:
            if not _job_not_found(error):
                raise
        else:
            raise JobNameTakenError(
                "job_name",
                name,
                f"a training job with this name already exists in {self.session.region_name}",
                "pass another job_name, or leave it unset for a timestamped one",
            )
        claim = _claim_location(spec)
        if claim is None:
            return
        bucket, key = claim
        try:
            with aws_errors(f"claim the job name {name} at s3://{bucket}/{key}"):
                self.session.s3_client().put_object(
                    Bucket=bucket,
                    Key=key,
                    Body=b"",
                    IfNoneMatch="*",
                    ServerSideEncryption="aws:kms",
                    **self.session.bucket_owner_args(bucket),
                )
        except ClientError as error:
            if _error_code(error) not in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise
            raise JobNameTakenError(
                "job_name",
                name,
                f"another submitter is starting a job of this name (s3://{bucket}/{key} exists)",
                "pass another job_name, or leave it unset for a timestamped one",
            ) from None

    def release(self, spec: TrainingJobSpec) -> None:
        """Remove the claim :meth:`reserve` wrote, when the job was not submitted after all."""
        claim = _claim_location(spec)
        if claim is not None:
            with aws_errors(f"release the job name {spec.TrainingJobName}"):
                self.session.s3_client().delete_object(Bucket=claim[0], Key=claim[1])

    def submit(self, request: JobRequest) -> None:
        spec = request.spec
        wire = spec.to_request()
        logger.info("Creating training job %s", spec.TrainingJobName)
        logger.debug("CreateTrainingJob request: %s", wire)
        try:
            with aws_errors(f"create the training job {spec.TrainingJobName}"):
                self.session.sagemaker_client().create_training_job(**wire)
        except ClientError as error:
            if _error_code(error) == "ResourceInUse":
                raise JobNameTakenError(
                    "job_name",
                    spec.TrainingJobName,
                    "a training job with this name already exists",
                    "pass another job_name, or leave it unset for a timestamped one",
                ) from None
            raise

    def describe(self, job_name: str) -> dict[str, Any]:
        delay = 1.0
        attempt = 0
        while True:
            attempt += 1
            try:
                with aws_errors(f"describe the training job {job_name}"):
                    response = self.session.sagemaker_client().describe_training_job(TrainingJobName=job_name)
            except ClientError as error:
                code = _error_code(error)
                if code in THROTTLING_CODES and attempt < self.describe_attempts:
                    logger.debug("DescribeTrainingJob throttled (%s); retrying in %.1fs", code, delay)
                    self.sleep(delay * random.uniform(0.5, 1.0))
                    delay = min(delay * 2, 20.0)
                    continue
                if _job_not_found(error):
                    raise ConfigurationError(
                        "job_name",
                        job_name,
                        f"no training job with this name in {self.session.region_name}",
                        "check the name (Session().list_training_jobs() lists recent jobs) and the region",
                    ) from None
                raise
            response.pop("ResponseMetadata", None)
            return dict(response)

    def stop(self, job_name: str, reason: str | None = None) -> None:
        if reason is not None:
            raise ConfigurationError(
                "reason",
                reason,
                "SageMaker interrupts spot instances itself; a job on it cannot be interrupted on request",
                "call stop() without a reason, or rehearse the interruption locally",
            )
        try:
            with aws_errors(f"stop the training job {job_name}"):
                self.session.sagemaker_client().stop_training_job(TrainingJobName=job_name)
        except ClientError as error:
            # Stopping a job that already ended is what the caller wanted anyway.
            if _error_code(error) == "ValidationException":
                if self.describe(job_name)["TrainingJobStatus"] in contract.TERMINAL_STATUSES:
                    return
            raise

    def metric_records(self, job_name: str, metric_names: Sequence[str] | None = None) -> list[MetricRecord]:
        """Each metric's CloudWatch datapoints (namespace ``/aws/sagemaker/TrainingJobs``, dimension
        ``TrainingJobName``, ``Average`` per :data:`METRICS_PERIOD_SECONDS`, as the SDK's
        ``TrainingJobAnalytics`` reads them), in time order. A metric with no datapoints (the job is
        young, or metrics were not published) is scraped from the job's CloudWatch logs instead, each
        value with its log event's time and host."""
        description = self.describe(job_name)
        definitions = (description.get("AlgorithmSpecification") or {}).get("MetricDefinitions") or []
        names = list(metric_names or [d["Name"] for d in definitions])
        start = description.get("TrainingStartTime") or description.get("CreationTime")
        end = (description.get("TrainingEndTime") or datetime.now(timezone.utc)) + timedelta(minutes=1)
        records: list[MetricRecord] = []
        missing = []
        with aws_errors(f"read the CloudWatch metrics of {job_name}"):
            for name in names:
                points = self.session.cloudwatch_client().get_metric_statistics(
                    Namespace=METRICS_NAMESPACE,
                    MetricName=name,
                    Dimensions=[{"Name": "TrainingJobName", "Value": job_name}],
                    StartTime=start,
                    EndTime=end,
                    Period=METRICS_PERIOD_SECONDS,
                    Statistics=["Average"],
                )["Datapoints"]
                if not points:
                    missing.append(name)
                points.sort(key=lambda point: point["Timestamp"])
                records += [MetricRecord(name, float(p["Average"]), p["Timestamp"], None) for p in points]
        if missing:
            parser = MetricParser([d for d in definitions if d["Name"] in missing])
            events = self._events(job_name, follow=False)
            records += [
                MetricRecord(
                    sample.name,
                    sample.value,
                    datetime.fromtimestamp(event.timestamp / 1000, tz=timezone.utc),
                    sample.host,
                )
                for event in events
                for sample in parser.parse_line(event.line())
            ]
        return records

    def log_lines(self, job_name: str, follow: bool = False) -> Iterator[str]:
        events = self._events(job_name, follow)
        while True:
            try:
                event = next(events)
            except StopIteration as end:
                final: dict[str, Any] | None = end.value
                break
            yield event.line()
        yield from summary_lines(final or {})

    def _events(self, job_name: str, follow: bool) -> Generator[LogEvent, None, dict[str, Any] | None]:
        """The merge loop behind :meth:`log_lines` (contract in the module docstring).

        Returns the final description when the job was terminal at the last read, else None.
        """
        merger = LogStreamMerger(
            self.session.logs_client(),
            job_name,
            streams_page_size=self.streams_page_size,
            events_page_size=self.events_page_size,
        )
        statuses = StatusTracker()
        description = self.describe(job_name)
        expected_hosts = instance_count(description)
        delay = self.poll_seconds
        polls = 0
        watched_running = False
        while True:
            terminal = description["TrainingJobStatus"] in contract.TERMINAL_STATUSES
            if terminal and watched_running:
                # CloudWatch ingests with a few seconds' lag; read once more after the job ended.
                self.sleep(self.final_flush_seconds)
            watched_running = watched_running or not terminal
            arrived = 0
            with aws_errors(f"read the CloudWatch logs of {job_name}"):
                # Rediscover while hosts are missing, now and then (spot restarts add streams), and last.
                if len(merger.streams) < expected_hosts or terminal or polls % 6 == 0:
                    merger.discover()
                for event in heapq.merge(statuses.new_events(description), merger.poll()):
                    arrived += event.host != SERVICE_SOURCE
                    yield event
            if terminal or not follow:
                return description if terminal else None
            delay = self.poll_seconds if arrived else min(max(delay, 0.001) * 1.5, self.max_poll_seconds)
            self.sleep(delay)
            polls += 1
            description = self.describe(job_name)
