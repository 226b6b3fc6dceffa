"""``smlaunch serve`` as clients see it: a real server process on 127.0.0.1, driven by unmodified
boto3 (waiters, pagination), raw signed and unsigned HTTP, and the AWS CLI; jobs run for real on
the emulated platform with their code and artifacts in an S3 API (moto's server)."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import botocore.config
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from smlaunch.sdk.sessions.local import LocalSession
from tests.functional._local_helpers import kill_leftover_jobs
from tests.functional._serve_helpers import (
    KEY_ID,
    SECRET,
    MotoS3,
    Server,
    create_request,
    upload_code,
    wait_status,
)

pytestmark = pytest.mark.slow

HELLO = """
import os
print("hello from", os.environ["SM_CURRENT_HOST"], flush=True)
print("loss=" + ("0.5" if os.environ["SM_CURRENT_HOST"] == "algo-1" else "0.25"), flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "weights.txt"), "w") as f:
    f.write(os.environ["SM_CURRENT_HOST"])
"""
SLEEPY = """
import time
print("sleeping", flush=True)
time.sleep(float(__import__("os").environ.get("SLEEP_SECONDS", "120")))
print("woke up", flush=True)
"""
FAILING = """
print("about to fail", flush=True)
raise RuntimeError("the loss went to NaN")
"""


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3]:
    moto = MotoS3()
    yield moto
    moto.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, s3: MotoS3) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("serve"), s3.url, max_concurrent_jobs=1)
    server.start()
    yield server
    server.stop()
    kill_leftover_jobs(server.store)
    print(server.log.read_text()[-4000:])


@pytest.fixture(scope="module")
def codes(server: Server, s3: MotoS3) -> dict[str, str]:
    return {
        name: upload_code(s3.client, server.tmp, name, script)
        for name, script in (("hello", HELLO), ("sleepy", SLEEPY), ("failing", FAILING))
    }


def test_a_job_runs_to_its_model_with_boto3_waiters_tags_and_logs(
    server: Server, codes: dict[str, str], s3: MotoS3
) -> None:
    sm, logs = server.client(), server.client("logs")
    arn = sm.create_training_job(
        **create_request(
            "two-hosts",
            codes["hello"],
            2,
            Tags=[{"Key": "team", "Value": "a"}],
            AlgorithmSpecification={
                "TrainingImage": "smlaunch-local",
                "TrainingInputMode": "File",
                "MetricDefinitions": [{"Name": "train:loss", "Regex": "loss=([0-9.]+)"}],
            },
        )
    )["TrainingJobArn"]
    with pytest.raises(ClientError) as taken:
        sm.create_training_job(**create_request("two-hosts", codes["hello"]))
    assert taken.value.response["Error"]["Code"] == "ResourceInUse"
    sm.get_waiter("training_job_completed_or_stopped").wait(
        TrainingJobName="two-hosts", WaiterConfig={"Delay": 1}
    )
    described = sm.describe_training_job(TrainingJobName="two-hosts")
    assert described["TrainingJobStatus"] == "Completed", described.get("FailureReason")
    assert described["TrainingJobArn"] == arn
    model = described["ModelArtifacts"]["S3ModelArtifacts"]
    assert model == "s3://serve-bucket/out/two-hosts/output/model.tar.gz"
    assert (
        s3.client.head_object(Bucket="serve-bucket", Key="out/two-hosts/output/model.tar.gz")["ContentLength"]
        > 0
    )

    sm.add_tags(ResourceArn=arn, Tags=[{"Key": "stage", "Value": "dev"}])
    sm.delete_tags(ResourceArn=arn, TagKeys=["team"])
    assert sm.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "stage", "Value": "dev"}]

    group = "/aws/sagemaker/TrainingJobs"
    streams = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix="two-hosts/")["logStreams"]
    names = [s["logStreamName"] for s in streams]
    assert [n.rsplit("-", 1)[0] for n in names] == ["two-hosts/algo-1", "two-hosts/algo-2"]
    assert all(n.rsplit("-", 1)[1].isdigit() and len(n.rsplit("-", 1)[1]) == 10 for n in names)
    events = logs.get_log_events(logGroupName=group, logStreamName=names[1], startFromHead=True)
    assert any("hello from algo-2" in e["message"] for e in events["events"])
    again = logs.get_log_events(
        logGroupName=group, logStreamName=names[1], nextToken=events["nextForwardToken"]
    )
    assert again["events"] == [] and again["nextForwardToken"] == events["nextForwardToken"]
    found = logs.filter_log_events(
        logGroupName=group, logStreamNamePrefix="two-hosts/", filterPattern='"hello from"'
    )
    assert sorted(e["logStreamName"] for e in found["events"]) == names

    # CloudWatch metrics, as TrainingJobAnalytics reads them (botocore speaks CBOR to CloudWatch)
    cloudwatch = server.client("cloudwatch")
    window = {
        "StartTime": described["CreationTime"] - timedelta(minutes=1),
        "EndTime": described["TrainingEndTime"] + timedelta(minutes=1),
    }
    job = [{"Name": "TrainingJobName", "Value": "two-hosts"}]
    stats = cloudwatch.get_metric_statistics(
        Namespace=group,
        MetricName="train:loss",
        Dimensions=job,
        Period=3600,
        Statistics=["Average", "SampleCount"],
        **window,
    )["Datapoints"]
    assert [(p["Average"], p["SampleCount"]) for p in stats] == [(0.375, 2.0)]
    host = [{"Name": "Host", "Value": "two-hosts/algo-2"}]
    query = {"Namespace": group, "MetricName": "train:loss", "Dimensions": host}
    data = cloudwatch.get_metric_data(
        MetricDataQueries=[{"Id": "loss", "MetricStat": {"Metric": query, "Period": 60, "Stat": "Maximum"}}],
        **window,
    )["MetricDataResults"]
    assert data[0]["Values"] == [0.25] and data[0]["StatusCode"] == "Complete"


def test_a_failing_jobs_reason_is_the_local_backends(server: Server, codes: dict[str, str]) -> None:
    sm = server.client()
    sm.create_training_job(**create_request("failing", codes["failing"]))
    with pytest.raises(Exception, match="Failed"):
        sm.get_waiter("training_job_completed_or_stopped").wait(
            TrainingJobName="failing", WaiterConfig={"Delay": 1}
        )
    described = sm.describe_training_job(TrainingJobName="failing")
    local = LocalSession(root=server.store).backend().describe("failing")
    assert described["TrainingJobStatus"] == "Failed"
    assert described["FailureReason"] == local["FailureReason"]
    assert (
        "AlgorithmError" in described["FailureReason"]
        and "the loss went to NaN" in described["FailureReason"]
    )


def test_the_queue_pagination_over_250_jobs_and_stop(server: Server, codes: dict[str, str]) -> None:
    sm = server.client()
    sm.create_training_job(**create_request("sleeper", codes["sleepy"]))
    wait_status(sm, "sleeper", {"Training"})
    for i in range(3):  # in order: the queue's first places are known
        sm.create_training_job(**create_request(f"queued-{i:03d}", codes["hello"]))
    with ThreadPoolExecutor(4) as pool:  # the rest as concurrent clients send them
        clients = [server.client() for _ in range(4)]
        list(
            pool.map(
                lambda i: clients[i % 4].create_training_job(
                    **create_request(f"queued-{i:03d}", codes["hello"])
                ),
                range(3, 250),
            )
        )
    waiting = sm.describe_training_job(TrainingJobName="queued-002")
    assert (waiting["TrainingJobStatus"], waiting["SecondaryStatus"]) == ("InProgress", "Starting")
    message = waiting["SecondaryStatusTransitions"][-1]["StatusMessage"]
    assert "at most 1 job(s) at a time" in message and "1 running, 2 queued ahead" in message

    pages = list(
        sm.get_paginator("list_training_jobs").paginate(
            NameContains="queued-", PaginationConfig={"PageSize": 100}
        )
    )
    assert [len(p["TrainingJobSummaries"]) for p in pages] == [100, 100, 50]
    summaries = [s for p in pages for s in p["TrainingJobSummaries"]]
    assert sorted(s["TrainingJobName"] for s in summaries) == [f"queued-{i:03d}" for i in range(250)]
    created = [s["CreationTime"] for s in summaries]
    assert created == sorted(created)  # CreationTime, ascending: the service's default
    assert [s["TrainingJobName"] for s in summaries[:3]] == ["queued-000", "queued-001", "queued-002"]
    newest = sm.list_training_jobs(SortBy="Name", SortOrder="Descending", MaxResults=2)[
        "TrainingJobSummaries"
    ]
    assert [s["TrainingJobName"] for s in newest] == ["two-hosts", "sleeper"]

    with ThreadPoolExecutor(4) as pool:
        list(
            pool.map(
                lambda i: clients[i % 4].stop_training_job(TrainingJobName=f"queued-{i:03d}"), range(250)
            )
        )
    stopped = sm.describe_training_job(TrainingJobName="queued-100")
    assert stopped["TrainingJobStatus"] == "Stopped"
    with pytest.raises(ClientError, match="in status Stopped"):
        sm.stop_training_job(TrainingJobName="queued-100")
    sm.stop_training_job(TrainingJobName="sleeper")
    sm.get_waiter("training_job_completed_or_stopped").wait(
        TrainingJobName="sleeper", WaiterConfig={"Delay": 1}
    )
    assert sm.describe_training_job(TrainingJobName="sleeper")["TrainingJobStatus"] == "Stopped"
    listed = sm.list_training_jobs(StatusEquals="Stopped", MaxResults=100)
    assert len(listed["TrainingJobSummaries"]) == 100 and "NextToken" in listed


def _raw(server: Server, target: str, body: bytes, secret: str | None = SECRET) -> tuple[int, dict[str, Any]]:
    """POST a request as any HTTP client would (signed with ``secret``, unsigned with None)."""
    request = AWSRequest(
        method="POST",
        url=server.url + "/",
        data=body,
        headers={"X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.1"},
    )
    if secret is not None:
        SigV4Auth(Credentials(KEY_ID, secret), "sagemaker", "us-west-2").add_auth(request)
    prepared = request.prepare()
    sent = urllib.request.Request(server.url + "/", data=body, headers=dict(prepared.headers), method="POST")
    try:
        with urllib.request.urlopen(sent, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_unsigned_and_wrongly_signed_requests_are_refused(server: Server) -> None:
    assert _raw(server, "SageMaker.ListTrainingJobs", b"{}", secret=None) == (
        403,
        {"__type": "MissingAuthenticationTokenException", "message": "Missing Authentication Token"},
    )
    status, body = _raw(server, "SageMaker.ListTrainingJobs", b"{}", secret="not-the-secret")
    assert (status, body["__type"]) == (400, "InvalidSignatureException")
    with pytest.raises(ClientError) as caught:
        server.client(aws_access_key_id="AKUNKNOWN").list_training_jobs()
    assert caught.value.response["Error"]["Code"] == "UnrecognizedClientException"
    assert SECRET not in server.log.read_text()


def test_requests_botocore_would_refuse_are_refused_by_the_server(
    server: Server, codes: dict[str, str]
) -> None:
    status, body = _raw(server, "SageMaker.ListTrainingJobs", b'{"MaxResults": 1000, "SortBy": "Size"}')
    assert status == 400 and body["__type"] == "ValidationException"
    assert body["message"].startswith("2 validation errors detected: ")
    assert (
        "Value '1000' at 'maxResults' failed to satisfy constraint: "
        "Member must have value less than or equal to 100" in body["message"]
    )
    assert (
        "Value 'Size' at 'sortBy' failed to satisfy constraint: Member must satisfy enum value set: ["
        in body["message"]
    )
    status, body = _raw(server, "SageMaker.DescribeTrainingJob", b'{"TrainingJobName": 5}')
    assert (status, body["__type"]) == (400, "SerializationException")
    status, body = _raw(server, "SageMaker.CreateModel", b"{}")
    assert (status, body["__type"]) == (400, "UnknownOperationException") and "SageMaker.CreateModel" in body[
        "message"
    ]

    unchecked = server.client(config=botocore.config.Config(parameter_validation=False))
    with pytest.raises(ClientError) as caught:
        unchecked.create_training_job(**create_request("bad_name!", codes["hello"]))
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert "at 'trainingJobName' failed to satisfy constraint: Member must satisfy regular expression" in str(
        caught.value
    )
    with pytest.raises(ClientError, match="Requested resource not found"):
        unchecked.describe_training_job(TrainingJobName="no-such-job")
    local_code = create_request("local-code", "file:///etc")
    with pytest.raises(ClientError, match="is not an s3:// URI"):
        unchecked.create_training_job(**local_code)


def test_the_server_killed_mid_job_finds_it_and_its_queue_again(
    server: Server, codes: dict[str, str]
) -> None:
    sm = server.client()
    sm.create_training_job(**create_request("survivor", codes["sleepy"], Environment={"SLEEP_SECONDS": "6"}))
    sm.create_training_job(**create_request("waiting", codes["hello"]))
    wait_status(sm, "survivor", {"Training"})
    server.kill()
    server.start()
    sm = server.client()
    assert sm.describe_training_job(TrainingJobName="waiting")["SecondaryStatus"] == "Starting"
    sm.get_waiter("training_job_completed_or_stopped").wait(
        TrainingJobName="survivor", WaiterConfig={"Delay": 1}
    )
    assert sm.describe_training_job(TrainingJobName="survivor")["TrainingJobStatus"] == "Completed"
    sm.get_waiter("training_job_completed_or_stopped").wait(
        TrainingJobName="waiting", WaiterConfig={"Delay": 1}
    )
    assert sm.describe_training_job(TrainingJobName="waiting")["TrainingJobStatus"] == "Completed"


@pytest.mark.skipif(shutil.which("aws") is None, reason="the AWS CLI (`aws`) is not installed")
def test_the_aws_cli_unmodified(server: Server, tmp_path: Path) -> None:
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(f"[default]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n")
    env = {
        "PATH": __import__("os").environ["PATH"],
        "HOME": str(tmp_path),
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_DEFAULT_REGION": "us-west-2",
    }

    def aws(*args: str) -> Any:
        done = subprocess.run(
            ["aws", *args, "--endpoint-url", server.url, "--output", "json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    described = aws("sagemaker", "describe-training-job", "--training-job-name", "two-hosts")
    assert described["TrainingJobStatus"] == "Completed"
    listed = aws("sagemaker", "list-training-jobs", "--name-contains", "two-hosts")
    assert [s["TrainingJobName"] for s in listed["TrainingJobSummaries"]] == ["two-hosts"]
    stream = aws(
        "logs",
        "describe-log-streams",
        "--log-group-name",
        "/aws/sagemaker/TrainingJobs",
        "--log-stream-name-prefix",
        "two-hosts/",
    )["logStreams"][0]["logStreamName"]
    events = aws(
        "logs",
        "get-log-events",
        "--log-group-name",
        "/aws/sagemaker/TrainingJobs",
        "--log-stream-name",
        stream,
        "--start-from-head",
    )["events"]
    assert any("hello from algo-1" in e["message"] for e in events)
