"""SageMakerBackend against moto: submission, describe under throttling, following logs, stop, metrics.

The job is driven by the test through :class:`FakeSageMaker` steps, run by the backend's injected
clock, so every scenario is deterministic and takes no wall-clock time beyond moto's.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from smlaunch.contract.strategy import Strategy
from smlaunch.sdk.backends.sagemaker.backend import SageMakerBackend, summary_lines
from smlaunch.sdk.errors import ConfigurationError, JobFailedError, UnsupportedByBackendError
from smlaunch.sdk.jobs.job import TrainingJob
from smlaunch.sdk.request.spec import JobRequest, TrainingJobSpec
from smlaunch.sdk.sessions.sagemaker import Session
from tests.functional._sagemaker_moto import ROLE_ARN, FakeSageMaker, fake_aws

JOB = "bert-2026-11-22-02-30-47-904"
METRICS = [{"Name": "train:loss", "Regex": r"loss=([0-9.]+)"}]


def make_spec(name: str = JOB, **overrides: Any) -> TrainingJobSpec:
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {
            "TrainingInputMode": "FastFile",
            "TrainingImage": "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-gpu-py310",
            "MetricDefinitions": METRICS,
            "EnableSageMakerMetricsTimeSeries": True,
        },
        "RoleArn": ROLE_ARN,
        "OutputDataConfig": {"S3OutputPath": "s3://out-bucket/prefix/"},
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 3, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200},
        "HyperParameters": {"epochs": "2", "sagemaker_program": '"train.py"'},
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "InputMode": "Pipe",
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": "s3://data/train/",
                        "S3DataDistributionType": "ShardedByS3Key",
                    }
                },
            },
        ],
        "CheckpointConfig": {"S3Uri": "s3://ckpt/bert/"},
        "EnableManagedSpotTraining": True,
        "RetryStrategy": {"MaximumRetryAttempts": 2},
        "Environment": {"NCCL_DEBUG": "INFO"},
        "VpcConfig": {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]},
        "EnableNetworkIsolation": True,
        "Tags": [{"Key": "team", "Value": "nlp"}],
    }
    request.update(overrides)
    return TrainingJobSpec(**request)


def make_request(name: str = JOB, **overrides: Any) -> JobRequest:
    """:func:`make_spec` as the estimator hands it to a backend (no distribution)."""
    return JobRequest(make_spec(name, **overrides), Strategy.NONE)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSageMaker]:
    with fake_aws(monkeypatch) as fake:
        yield fake


@pytest.fixture
def backend(aws: FakeSageMaker) -> SageMakerBackend:
    session = Session(boto_session=aws.boto_session)
    backend = session.backend()
    assert isinstance(backend, SageMakerBackend)
    backend.sleep = aws.sleep
    backend.streams_page_size = 2  # 3 hosts: discovery needs two pages
    backend.events_page_size = 4
    return backend


def test_check_accepts_every_sagemaker_option_and_refuses_local_uris(backend: SageMakerBackend) -> None:
    backend.check(make_request())
    with pytest.raises(UnsupportedByBackendError) as error:
        backend.check(make_request(OutputDataConfig={"S3OutputPath": "file:///tmp/out"}))
    assert error.value.field == "output_path"


def test_submit_sends_the_spec_as_the_request(aws: FakeSageMaker, backend: SageMakerBackend) -> None:
    bodies: list[dict[str, Any]] = []
    client = backend.session.sagemaker_client()
    client.meta.events.register(
        "request-created.sagemaker.CreateTrainingJob",
        lambda request, **_: bodies.append(json.loads(request.body)),
    )
    spec = make_spec()
    backend.submit(JobRequest(spec, Strategy.NONE))
    assert bodies == [spec.to_request()]  # the wire body, after boto3's validation and serialization
    description = backend.describe(JOB)
    assert description["TrainingJobStatus"] == "InProgress"
    assert description["AlgorithmSpecification"]["MetricDefinitions"] == METRICS
    assert "ResponseMetadata" not in description

    with pytest.raises(ConfigurationError) as error:
        backend.submit(JobRequest(spec, Strategy.NONE))  # a name is unique per account and region
    assert error.value.field == "job_name"


def test_tensorboard_output_config_reaches_the_service(aws: FakeSageMaker, backend: SageMakerBackend) -> None:
    bodies: list[dict[str, Any]] = []
    backend.session.sagemaker_client().meta.events.register(
        "request-created.sagemaker.CreateTrainingJob",
        lambda request, **_: bodies.append(json.loads(request.body)),
    )
    tensorboard = {"S3OutputPath": "s3://out-bucket/bert/tensorboard", "LocalPath": "/opt/ml/output/tb"}
    backend.check(make_request(TensorBoardOutputConfig=tensorboard))
    backend.submit(make_request(TensorBoardOutputConfig=tensorboard))
    assert bodies[0]["TensorBoardOutputConfig"] == tensorboard  # accepted by boto3's model, sent as is
    with pytest.raises(UnsupportedByBackendError) as error:
        backend.check(make_request(TensorBoardOutputConfig={"S3OutputPath": "file:///tmp/tb"}))
    assert error.value.field == "tensorboard_output_config.s3_output_path"


def test_describe_retries_throttling_with_growing_backoff(
    aws: FakeSageMaker, backend: SageMakerBackend
) -> None:
    backend.submit(make_request())
    client = backend.session.sagemaker_client()
    throttled = {"left": 3}

    def throttle(**_: Any) -> Any:
        if throttled["left"] == 0:
            return None
        throttled["left"] -= 1
        http = type("Http", (), {"status_code": 400, "headers": {}})()
        return http, {
            "Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }

    client.meta.events.register("before-call.sagemaker.DescribeTrainingJob", throttle)
    assert backend.describe(JOB)["TrainingJobName"] == JOB
    assert len(aws.sleeps) == 3
    assert aws.sleeps[0] <= 1.0 and aws.sleeps[2] > aws.sleeps[0]  # exponential, jittered

    throttled["left"] = 100
    backend.describe_attempts = 4
    with pytest.raises(Exception, match="ThrottlingException"):
        backend.describe(JOB)


def test_describe_unknown_job_names_the_job(backend: SageMakerBackend) -> None:
    with pytest.raises(ConfigurationError) as error:
        backend.describe("no-such-job")
    assert (error.value.field, error.value.value) == ("job_name", "no-such-job")


def test_follow_logs_through_a_whole_job(aws: FakeSageMaker, backend: SageMakerBackend) -> None:
    backend.submit(make_request())
    hosts = ["algo-1", "algo-2", "algo-3"]
    expected: list[str] = []

    def training() -> None:
        aws.transition(JOB, "Training", "Training image download completed. Training in progress.")
        expected.extend(aws.interleaved(JOB, hosts, lines_per_host=5))

    def more_and_complete() -> None:
        expected.extend(aws.interleaved(JOB, hosts, lines_per_host=3))
        aws.transition(JOB, "Uploading", "Uploading generated training model")
        aws.complete(JOB, training_time_in_seconds=100, billable_time_in_seconds=40)

    def late_line() -> None:  # written after Completed, before the final read
        aws.log(JOB, "algo-2", "loss=0.125 final")
        expected.append("[algo-2] loss=0.125 final")

    aws.then(
        lambda: None,  # no log group yet
        lambda: aws.transition(JOB, "Downloading", "Downloading input data"),
        lambda: aws.ensure_group(),  # group exists, no stream of ours yet
        training,
        more_and_complete,
        late_line,
    )
    lines = list(backend.log_lines(JOB, follow=True))

    host_lines = [line for line in lines if not line.startswith("[sagemaker]")]
    assert host_lines == expected  # every line once, in order, host-prefixed
    status = [line.split(" ", 3)[3] for line in lines if line.startswith("[sagemaker] 20")]
    assert status == [
        "Starting - Launching requested ML instances",
        "Downloading - Downloading input data",
        "Training - Training image download completed. Training in progress.",
        "Uploading - Uploading generated training model",
        "Completed - Training job completed",
    ]
    assert lines[-4:-1] == [  # 3 instances: per-instance seconds times 3, as the SDK prints them
        "[sagemaker] Training seconds: 300",
        "[sagemaker] Billable seconds: 120",
        "[sagemaker] Managed Spot Training savings: 60.0%",
    ]
    assert (
        lines[-1]
        == f"[sagemaker] Completed in 100 s; model: s3://out-bucket/prefix/{JOB}/output/model.tar.gz"
    )
    assert aws.steps == []  # the final-flush wait happened
    # Status lines sit in the timeline: Training before the first host line, Completed after the last
    # line written before completion.
    training_at = next(i for i, line in enumerate(lines) if " Training - " in line)
    completed_at = next(i for i, line in enumerate(lines) if " Completed - " in line)
    assert training_at < lines.index(expected[0])
    assert lines.index(expected[-2]) < completed_at < lines.index(expected[-1])

    # logs() of the finished job: the same lines, without waiting.
    sleeps = len(aws.sleeps)
    again = list(backend.log_lines(JOB))
    assert [line for line in again if not line.startswith("[sagemaker]")] == expected
    assert len(aws.sleeps) == sleeps
    job = TrainingJob(backend, JOB)
    assert job.metrics() == {"train:loss": [0.125]}
    aws.job(JOB).final_metric_data_list = [{"MetricName": "train:loss", "Value": 0.125}]
    assert job.final_metrics() == {"train:loss": 0.125}


def test_job_failing_before_any_log_line_ends_cleanly(aws: FakeSageMaker, backend: SageMakerBackend) -> None:
    backend.submit(make_request())
    aws.then(lambda: aws.fail(JOB, "CapacityError: Unable to provision requested ML compute capacity."))
    out = io.StringIO()
    with pytest.raises(JobFailedError) as error:
        TrainingJob(backend, JOB).wait(logs=True, out=out)
    assert (error.value.job_name, error.value.status) == (JOB, "Failed")
    assert error.value.reason.startswith("CapacityError")
    assert "Failed - Training job failed" in out.getvalue()
    assert "Training seconds" not in out.getvalue()
    last = out.getvalue().splitlines()[-1]
    assert last == "[sagemaker] Failed: CapacityError: Unable to provision requested ML compute capacity."


def test_completed_wait_returns_description_and_prints_summary(
    aws: FakeSageMaker, backend: SageMakerBackend
) -> None:
    backend.submit(make_request(EnableManagedSpotTraining=None))
    aws.then(
        lambda: aws.log(JOB, "algo-1", "hello"),
        lambda: aws.complete(JOB, training_time_in_seconds=10, billable_time_in_seconds=10),
    )
    out = io.StringIO()
    description = TrainingJob(backend, JOB).wait(logs=True, out=out)
    assert description["TrainingJobStatus"] == "Completed"
    text = out.getvalue()
    assert "[algo-1] hello" in text and "Billable seconds: 30" in text and "Spot" not in text


def test_ctrl_c_stops_waiting_not_the_job(aws: FakeSageMaker, backend: SageMakerBackend) -> None:
    backend.submit(make_request())

    def interrupt() -> None:
        raise KeyboardInterrupt

    aws.then(interrupt)
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        TrainingJob(backend, JOB).wait(logs=True, out=out)
    assert f"Estimator.attach('{JOB}')" in out.getvalue()
    assert backend.describe(JOB)["TrainingJobStatus"] == "InProgress"


def test_stop_running_job_and_stop_of_finished_job(aws: FakeSageMaker, backend: SageMakerBackend) -> None:
    backend.submit(make_request())
    job = TrainingJob(backend, JOB)
    with pytest.raises(ConfigurationError, match=r"reason.*SageMaker interrupts spot instances itself"):
        job.stop(reason="spot")
    assert job.status == "InProgress"
    job.stop()
    assert job.status == "Stopping"
    aws.transition(JOB, "Stopped", "The job was stopped", status="Stopped")
    job.stop()  # already ended: nothing to do, no error
    assert job.status == "Stopped"
    assert job.wait(logs=False)["TrainingJobStatus"] == "Stopped"  # a warning, not an exception (as the SDK)
    assert job.model_data == f"s3://out-bucket/prefix/{JOB}/output/model.tar.gz"


def test_a_failure_reason_closes_in_one_line_led_by_its_exception() -> None:
    toolkit = (  # SageMaker training toolkit's FailureReason for a script that raised
        'AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "ValueError: boom"\n'
        'Command "/opt/conda/bin/python3.10 train.py", exit code: 1'
    )
    ours = "AlgorithmError: rank 0 on host algo-1 exited with code 1\nErrorMessage: ValueError: boom\nTb"
    assert summary_lines({"TrainingJobStatus": "Failed", "FailureReason": toolkit}) == [
        "[sagemaker] Failed: ValueError: boom (AlgorithmError: ExecuteUserScriptError)"
    ]
    assert summary_lines({"TrainingJobStatus": "Failed", "FailureReason": ours}, "smlaunch") == [
        "[smlaunch] Failed: ValueError: boom (AlgorithmError: rank 0 on host algo-1 exited with code 1)"
    ]


def test_summary_lines_give_seconds_only_for_completed_and_one_closing_line() -> None:
    assert summary_lines({"TrainingJobStatus": "InProgress", "TrainingTimeInSeconds": 5}) == []
    assert summary_lines({"TrainingJobStatus": "Failed", "TrainingTimeInSeconds": 5}) == [
        "[sagemaker] Failed: (No reason provided)"  # as the SDK's UnexpectedStatusException says
    ]
    assert summary_lines(
        {"TrainingJobStatus": "Failed", "FailureReason": "AlgorithmError: exit 3\nLast lines: x"}
    ) == ["[sagemaker] Failed: AlgorithmError: exit 3"]  # one line: the rest is in describe()
    assert summary_lines(
        {"TrainingJobStatus": "Completed", "ResourceConfig": {"InstanceCount": 2}, "TrainingTimeInSeconds": 5}
    ) == ["[sagemaker] Training seconds: 10", "[sagemaker] Completed in 5 s"]  # no model: no model line
    assert summary_lines({"TrainingJobStatus": "Stopped", "TrainingTimeInSeconds": 5}) == [
        "[sagemaker] Stopped by user"
    ]
    assert summary_lines(
        {"TrainingJobStatus": "Stopped", "FailureReason": "MaxRuntimeExceeded: Training job exceeded 60 s"}
    ) == ["[sagemaker] Stopped: MaxRuntimeExceeded: Training job exceeded 60 s"]


def test_summary_says_where_the_model_is_and_local_jobs_bill_nothing() -> None:
    description = {
        "TrainingJobStatus": "Completed",
        "ResourceConfig": {"InstanceCount": 1},
        "TrainingTimeInSeconds": 7,
        "BillableTimeInSeconds": 7,
        "ModelArtifacts": {"S3ModelArtifacts": "s3://b/job/output/model.tar.gz"},
    }
    assert summary_lines(description) == [
        "[sagemaker] Training seconds: 7",
        "[sagemaker] Billable seconds: 7",
        "[sagemaker] Completed in 7 s; model: s3://b/job/output/model.tar.gz",
    ]
    assert summary_lines(description, "smlaunch", billable_seconds=False) == [
        "[smlaunch] Training seconds: 7",
        "[smlaunch] Completed in 7 s; model: s3://b/job/output/model.tar.gz",
    ]
