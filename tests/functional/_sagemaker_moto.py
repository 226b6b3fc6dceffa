"""A SageMaker service a test can drive: moto (in-process) plus the behaviour moto lacks.

Every client is a real boto3 client (parameter validation on) talking to moto through botocore; the
only fakes are moto's own, and the few server-side behaviours moto does not have are added on moto's
side (its response handlers), so requests still go over botocore's wire serialization:

- ``StopTrainingJob``: moto has no handler; ours moves the job to Stopping.
- ``HeadBucket`` with ``ExpectedBucketOwner``: moto ignores the header; ours answers 403 when the bucket
  belongs to another account, as S3 does.
- ``CreateTrainingJob``: moto starts jobs Completed, replaces ``MetricDefinitions`` with a canned
  one and overwrites a job of the same name; ours starts them InProgress/Starting, keeps what was
  sent and refuses a duplicate name (``ResourceInUse``), as the service does.

:class:`FakeSageMaker` then moves a job through its states and writes host log events to CloudWatch,
and its ``sleep`` is the clock injected into the backend: each sleep runs the next scripted step, so
a test plays a whole job deterministically in one thread, without waiting.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core.responses import EmptyResult
from moto.s3 import responses as s3_responses
from moto.sagemaker import models as sm_models
from moto.sagemaker.exceptions import ResourceInUseException
from moto.sagemaker.models import sagemaker_backends
from moto.sagemaker.responses import SageMakerResponse

ACCOUNT = "123456789012"
OTHER_ACCOUNT = "999999999999"
REGION = "us-west-2"
ROLE_NAME = "SageMakerRole"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{ROLE_NAME}"
DEFAULT_BUCKET = f"sagemaker-{REGION}-{ACCOUNT}"
LOG_GROUP = "/aws/sagemaker/TrainingJobs"

TRUST_POLICY = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "sagemaker.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
)


def aws_test_env(monkeypatch: pytest.MonkeyPatch, credentials: bool = True) -> None:
    """Environment with fake credentials (or none), no config files, and no metadata-service probe."""
    for name in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "MOTO_ACCOUNT_ID",
        "AWS_REGION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/smlaunch-test-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/smlaunch-test-credentials")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    if credentials:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    else:
        monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)


# --- moto fidelity patches ----------------------------------------------------------------------


def _stop_training_job(self: SageMakerResponse) -> Any:
    name = self._get_param("TrainingJobName")
    job = self.sagemaker_backend.training_jobs.get(name)
    if job is None:
        raise sm_models.ValidationError(message=f"Could not find training job '{name}'.")
    if job.training_job_status != "InProgress":
        raise sm_models.ValidationError(
            message=f"The request was rejected because the training job is in status "
            f"{job.training_job_status}."
        )
    job.training_job_status = "Stopping"
    job.secondary_status = "Stopping"
    job.last_modified_time = datetime.now(timezone.utc)
    job.secondary_status_transitions.append(
        {
            "Status": "Stopping",
            "StartTime": job.last_modified_time,
            "StatusMessage": "Stopping the training job",
        }
    )
    return EmptyResult()


def install_moto_fidelity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Add StopTrainingJob, ExpectedBucketOwner and realistic job creation to moto (see module doc)."""
    monkeypatch.setattr(SageMakerResponse, "stop_training_job", _stop_training_job, raising=False)

    original_head = s3_responses.S3Response.head_bucket

    def head_bucket(self: Any) -> Any:
        expected = self.headers.get("x-amz-expected-bucket-owner")
        if expected:
            try:
                bucket = self.backend.head_bucket(self.bucket_name)
            except Exception:
                bucket = None
            if bucket is not None and str(bucket.account_id) != str(expected):
                return 403, {}, ""
        return original_head(self)

    monkeypatch.setattr(s3_responses.S3Response, "head_bucket", head_bucket)

    original_create = sm_models.SageMakerModelBackend.create_training_job

    def create_training_job(self: Any, **kwargs: Any) -> Any:
        name = kwargs.get("training_job_name")
        if name in self.training_jobs:  # moto silently replaces the job; the service refuses
            raise ResourceInUseException(message=f"Training job names must be unique: {name}")
        sent = copy.deepcopy(kwargs.get("algorithm_specification"))
        job = original_create(self, **kwargs)
        job.algorithm_specification = sent
        now = datetime.now(timezone.utc)
        job.training_job_status = "InProgress"
        job.secondary_status = "Starting"
        job.training_start_time = None
        job.training_end_time = None
        job.last_modified_time = now
        job.secondary_status_transitions = [
            {
                "Status": "Starting",
                "StartTime": now,
                "StatusMessage": "Launching requested ML instances",
            }
        ]
        job.final_metric_data_list = []
        job.environment = kwargs.get("environment")
        return job

    monkeypatch.setattr(sm_models.SageMakerModelBackend, "create_training_job", create_training_job)


# --- the service a test drives ------------------------------------------------------------------


class FakeSageMaker:
    """Handles on moto's state, plus a scripted clock. Use inside :func:`fake_aws`."""

    def __init__(self, boto_session: boto3.Session) -> None:
        self.boto_session = boto_session
        self.logs = boto_session.client("logs")
        self.steps: list[Callable[[], None]] = []
        self.sleeps: list[float] = []
        self._log_clock = 0

    # clock

    def sleep(self, seconds: float) -> None:
        """The backend's clock: records the delay and runs the next scripted step, if any."""
        self.sleeps.append(seconds)
        if self.steps:
            self.steps.pop(0)()

    def then(self, *steps: Callable[[], None]) -> FakeSageMaker:
        self.steps.extend(steps)
        return self

    # jobs

    def job(self, name: str) -> Any:
        return sagemaker_backends[ACCOUNT][REGION].training_jobs[name]

    def transition(
        self, name: str, secondary: str, message: str, status: str | None = None, **fields: Any
    ) -> None:
        """Move the job to ``secondary`` (and ``status``); set other describe fields (snake_case)."""
        job = self.job(name)
        now = datetime.fromtimestamp(self._now_ms() / 1000, tz=timezone.utc)
        if job.secondary_status_transitions:
            job.secondary_status_transitions[-1].setdefault("EndTime", now)
        job.secondary_status_transitions.append(
            {"Status": secondary, "StartTime": now, "StatusMessage": message}
        )
        job.secondary_status = secondary
        job.last_modified_time = now
        if status is not None:
            job.training_job_status = status
        if secondary == "Training" and job.training_start_time is None:
            job.training_start_time = now
        if status in ("Completed", "Failed", "Stopped"):
            job.training_end_time = now
        for key, value in fields.items():
            setattr(job, key, value)

    def complete(self, name: str, **fields: Any) -> None:
        self.transition(name, "Completed", "Training job completed", status="Completed", **fields)

    def fail(self, name: str, reason: str) -> None:
        self.transition(name, "Failed", "Training job failed", status="Failed", failure_reason=reason)

    # logs

    def _now_ms(self) -> int:
        """Wall-clock milliseconds (so host lines and status transitions share one timeline), strictly
        after the last line written."""
        self._log_clock = max(self._log_clock + 1, int(time.time() * 1000))
        return self._log_clock

    def ensure_group(self) -> None:
        try:
            self.logs.create_log_group(logGroupName=LOG_GROUP)
        except self.logs.exceptions.ResourceAlreadyExistsException:
            pass

    def stream_name(self, job: str, host: str) -> str:
        return f"{job}/{host}-1700000000"

    def log(self, job: str, host: str, *messages: str, at: int | None = None) -> list[int]:
        """Write ``messages`` to ``host``'s stream (created if missing); returns their timestamps."""
        self.ensure_group()
        stream = self.stream_name(job, host)
        try:
            self.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        except self.logs.exceptions.ResourceAlreadyExistsException:
            pass
        stamps = []
        events = []
        for message in messages:
            if at is None:
                self._log_clock = self._now_ms()
            stamp = at if at is not None else self._log_clock
            stamps.append(stamp)
            events.append({"timestamp": stamp, "message": message})
        if events:
            self.logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream, logEvents=events)
        return stamps

    def interleaved(self, job: str, hosts: list[str], lines_per_host: int) -> list[str]:
        """Seed ``lines_per_host`` lines on each host, timestamps interleaved round-robin (one ms
        apart); returns the expected merged output (``[host] message`` in time order)."""
        expected = []
        base = self._now_ms()
        for i in range(lines_per_host):
            for h, host in enumerate(hosts):
                expected.append((base + i * len(hosts) + h, f"[{host}] step {i} from {host}"))
        for h, host in enumerate(hosts):
            self.ensure_group()
            stream = self.stream_name(job, host)
            try:
                self.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
            except self.logs.exceptions.ResourceAlreadyExistsException:
                pass
            events = [
                {"timestamp": base + i * len(hosts) + h, "message": f"step {i} from {host}"}
                for i in range(lines_per_host)
            ]
            self.logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream, logEvents=events)
        self._log_clock = base + lines_per_host * len(hosts)
        return [line for _, line in sorted(expected)]


@contextmanager
def fake_aws(monkeypatch: pytest.MonkeyPatch, role: bool = True) -> Iterator[FakeSageMaker]:
    """moto for S3, SageMaker, CloudWatch Logs, STS and IAM, with the fidelity patches and a role."""
    aws_test_env(monkeypatch)
    install_moto_fidelity(monkeypatch)
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        if role:
            session.client("iam").create_role(RoleName=ROLE_NAME, AssumeRolePolicyDocument=TRUST_POLICY)
        yield FakeSageMaker(session)
