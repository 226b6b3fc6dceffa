"""The whole ``PyTorch(...).fit()`` path on a SageMaker ``Session``, against moto.

The estimator, session and backend are the real ones; boto3 clients are real (parameter validation
on) and talk to moto in-process. The test plays the service's part: it moves each job through its
states and writes its hosts' CloudWatch logs, one scripted step per poll of the backend's clock.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smlaunch import JobFailedError, PyTorch, Session
from smlaunch.sdk.errors import ConfigurationError, JobNameTakenError
from smlaunch.sdk.jobs.job import TrainingJob
from tests.functional._sagemaker_moto import (
    ACCOUNT,
    DEFAULT_BUCKET,
    REGION,
    ROLE_ARN,
    ROLE_NAME,
    FakeSageMaker,
    fake_aws,
)

HOSTS = ["algo-1", "algo-2", "algo-3"]
METRICS = [{"Name": "train:loss", "Regex": r"loss=([0-9.]+)"}]
DISTRIBUTION = {"torch_distributed": {"enabled": True}}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSageMaker]:
    with fake_aws(monkeypatch) as fake:
        yield fake


@pytest.fixture
def session(aws: FakeSageMaker) -> Session:
    session = Session(boto_session=aws.boto_session)
    backend = session.backend()
    backend.sleep = aws.sleep  # type: ignore[attr-defined]
    backend.streams_page_size = 2  # type: ignore[attr-defined]  # 3 hosts: two pages of streams
    backend.events_page_size = 5  # type: ignore[attr-defined]
    return session


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src" / "utils").mkdir(parents=True)
    (tmp_path / "src" / "train.py").write_text("print('training')\n")
    (tmp_path / "src" / "utils" / "helpers.py").write_text("X = 1\n")
    (tmp_path / "data" / "train").mkdir(parents=True)
    (tmp_path / "data" / "train" / "part-0.csv").write_text("1,2\n3,4\n")
    (tmp_path / "data" / "train" / "part-1.csv").write_text("5,6\n")
    return tmp_path


def estimator(project: Path, session: Session, **overrides: Any) -> PyTorch:
    kwargs: dict[str, Any] = {
        "entry_point": "train.py",
        "source_dir": str(project / "src"),
        "role": ROLE_NAME,
        "framework_version": "2.1.0",
        "py_version": "py310",
        "instance_count": 3,
        "instance_type": "ml.p4d.24xlarge",
        "distribution": DISTRIBUTION,
        "metric_definitions": METRICS,
        "hyperparameters": {"epochs": 2, "lr": 3e-5},
        "sagemaker_session": session,
    }
    kwargs.update(overrides)
    return PyTorch(**kwargs)


def wire_bodies(session: Session) -> list[dict[str, Any]]:
    bodies: list[dict[str, Any]] = []
    session.sagemaker_client().meta.events.register(
        "request-created.sagemaker.CreateTrainingJob",
        lambda request, **_: bodies.append(json.loads(request.body)),
    )
    return bodies


def test_fit_stages_submits_follows_and_completes(
    aws: FakeSageMaker, session: Session, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = "bert-2026-11-22-03-00-00-000"
    inputs = {"train": str(project / "data" / "train")}
    est = estimator(project, session)
    planned = est.plan(inputs, job_name=job)
    bodies = wire_bodies(session)
    puts: list[dict[str, Any]] = []
    session.s3_client().meta.events.register(
        "provide-client-params.s3.PutObject", lambda params, **_: puts.append(dict(params))
    )
    expected: list[str] = []

    def training() -> None:
        aws.transition(job, "Training", "Training image download completed. Training in progress.")
        expected.extend(aws.interleaved(job, HOSTS, lines_per_host=4))

    def last_lines_and_complete() -> None:
        aws.log(job, "algo-1", "loss=0.5")
        aws.log(job, "algo-3", "loss=0.25")
        expected.extend(["[algo-1] loss=0.5", "[algo-3] loss=0.25"])
        aws.complete(job, training_time_in_seconds=200, billable_time_in_seconds=200)

    aws.then(
        lambda: aws.transition(job, "Downloading", "Downloading input data"),
        training,
        last_lines_and_complete,
    )
    est.fit(inputs, job_name=job)
    out = capsys.readouterr().out

    # The request moto received is the plan, byte for byte after JSON decoding.
    assert bodies == [planned.to_request()]
    assert planned.RoleArn == ROLE_ARN  # the role name was resolved through IAM
    assert planned.OutputDataConfig.S3OutputPath == f"s3://{DEFAULT_BUCKET}/"
    channel = planned.channel("train")
    assert channel is not None and channel.DataSource.S3DataSource is not None
    assert channel.DataSource.S3DataSource.S3Uri == f"s3://{DEFAULT_BUCKET}/{job}/input/train/"

    # The default bucket was created; code and data are where the request says, encrypted.
    s3 = aws.boto_session.client("s3")
    code = s3.get_object(Bucket=DEFAULT_BUCKET, Key=f"{job}/source/sourcedir.tar.gz")
    assert code["ServerSideEncryption"] == "aws:kms"
    assert code["Metadata"]  # content hash, so unchanged code is not uploaded twice
    with tarfile.open(fileobj=io.BytesIO(code["Body"].read())) as tar:
        assert {"train.py", "utils/helpers.py"} <= set(tar.getnames())
    # As the SDK: SSE-KMS on every upload, ExpectedBucketOwner because it is the generated bucket;
    # plus the empty claim on the job's name (SageMakerBackend.reserve), written before the code.
    assert sorted(p["Key"] for p in puts) == sorted(
        [f"{job}/source/.smlaunch-claim", f"{job}/source/sourcedir.tar.gz"]
        + [f"{job}/input/train/part-{i}.csv" for i in (0, 1)]
    )
    assert all(p["ServerSideEncryption"] == "aws:kms" and p["ExpectedBucketOwner"] == ACCOUNT for p in puts)
    staged = s3.list_objects_v2(Bucket=DEFAULT_BUCKET, Prefix=f"{job}/input/train/")["Contents"]
    assert sorted(o["Key"] for o in staged) == [f"{job}/input/train/part-{i}.csv" for i in (0, 1)]

    # Logs: every host line once, merged in time order; each status once; the billing summary.
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("[algo-")] == expected
    statuses = [line.split(" ", 3)[3] for line in lines if line.startswith("[sagemaker] 20")]
    assert [s.split(" - ")[0] for s in statuses] == ["Starting", "Downloading", "Training", "Completed"]
    assert "[sagemaker] Training seconds: 600" in lines and "[sagemaker] Billable seconds: 600" in lines

    # The job handle and the estimator's view of the finished job.
    assert est.model_data == f"s3://{DEFAULT_BUCKET}/{job}/output/model.tar.gz"
    assert est.latest_training_job is not None
    assert est.latest_training_job.metrics() == {"train:loss": [0.5, 0.25]}

    # attach() rebuilds the estimator, distribution and metric definitions included; the job has
    # ended, so it returns without waiting.
    sleeps = len(aws.sleeps)
    attached = PyTorch.attach(job, sagemaker_session=session)
    assert len(aws.sleeps) == sleeps
    assert attached.distribution == DISTRIBUTION
    assert attached.metric_definitions == METRICS
    assert (attached.instance_count, attached.instance_type) == (3, "ml.p4d.24xlarge")
    assert attached.model_data == est.model_data
    attached.logs()  # a finished job: prints everything and returns
    again = capsys.readouterr().out.splitlines()
    assert [line for line in again if line.startswith("[algo-")] == expected


def test_job_that_fails_before_any_log_line(
    aws: FakeSageMaker, session: Session, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = "bert-2026-11-22-03-00-01-000"
    est = estimator(project, session, distribution=None, instance_count=1)
    reason = "CapacityError: Unable to provision requested ML compute capacity."
    aws.then(lambda: None, lambda: aws.fail(job, reason))  # no log group ever appears
    with pytest.raises(JobFailedError) as error:
        est.fit("s3://my-bucket/data/train", job_name=job)
    assert (error.value.job_name, error.value.status, error.value.reason) == (job, "Failed", reason)
    out = capsys.readouterr().out
    assert "Failed - Training job failed" in out and "[algo-" not in out


def test_fit_without_waiting_then_stop(aws: FakeSageMaker, session: Session, project: Path) -> None:
    job = "bert-2026-11-22-03-00-02-000"
    est = estimator(project, session)
    est.fit("s3://my-bucket/data/train", job_name=job, wait=False)
    assert aws.sleeps == []  # returned at once
    handle = est.latest_training_job
    assert isinstance(handle, TrainingJob) and handle.status == "InProgress"
    est.stop()
    assert handle.status == "Stopping"
    aws.transition(job, "Stopped", "The job was stopped", status="Stopped")
    attached = PyTorch.attach(job, sagemaker_session=session, wait=True)  # Stopped: a warning, as the SDK
    assert attached.latest_training_job is not None and attached.latest_training_job.status == "Stopped"


def test_bad_input_fails_before_anything_is_created(
    aws: FakeSageMaker, session: Session, project: Path
) -> None:
    est = estimator(project, session)
    with pytest.raises(ConfigurationError) as missing:
        est.fit({"train": str(project / "no-such-dir")}, job_name="bert-x")
    assert missing.value.field == "inputs['train']"

    with pytest.raises(ConfigurationError) as role:
        estimator(project, session, role="NoSuchRole").fit("s3://my-bucket/d", job_name="bert-y")
    assert (role.value.field, role.value.value) == ("role", "NoSuchRole")

    assert session.list_training_jobs() == []
    s3 = aws.boto_session.client("s3")
    keys = s3.list_objects_v2(Bucket=DEFAULT_BUCKET).get("Contents", [])
    assert [k["Key"] for k in keys if k["Key"].startswith("bert-")] == []


def test_account_is_the_callers(session: Session) -> None:
    assert session.account_id == ACCOUNT


def test_earlier_artifacts_at_the_output_path_are_refused_before_anything_is_created(
    aws: FakeSageMaker, session: Session, project: Path
) -> None:
    """Job names are unique per account and region only: a namesake from another region (same
    bucket) left its model there, and SageMaker would overwrite it."""
    s3 = aws.boto_session.client("s3")
    s3.create_bucket(Bucket="shared-models", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket="shared-models", Key="runs/bert-z/output/model.tar.gz", Body=b"theirs")
    est = estimator(project, session, output_path="s3://shared-models/runs")
    with pytest.raises(ConfigurationError) as caught:
        est.fit("s3://my-bucket/d", job_name="bert-z")
    assert caught.value.field == "output_path"
    assert "s3://shared-models/runs/bert-z/output/model.tar.gz already exists" in str(caught.value)
    assert session.list_training_jobs() == []
    theirs = s3.get_object(Bucket="shared-models", Key="runs/bert-z/output/model.tar.gz")["Body"].read()
    assert theirs == b"theirs"


def test_a_used_job_name_is_refused_before_its_code_is_overwritten(
    aws: FakeSageMaker, session: Session, project: Path
) -> None:
    est = estimator(project, session)
    est.fit("s3://my-bucket/d", job_name="bert-again", wait=False)
    s3 = aws.boto_session.client("s3")
    key = "bert-again/source/sourcedir.tar.gz"
    first = s3.get_object(Bucket=DEFAULT_BUCKET, Key=key)["Body"].read()
    (project / "src" / "train.py").write_text("print('changed code')\n")
    with pytest.raises(JobNameTakenError) as caught:
        estimator(project, session).fit("s3://my-bucket/d", job_name="bert-again", wait=False)
    assert caught.value.field == "job_name" and "Fix: " in str(caught.value)
    assert s3.get_object(Bucket=DEFAULT_BUCKET, Key=key)["Body"].read() == first


def test_two_submitters_racing_on_one_name_never_run_each_others_code(
    aws: FakeSageMaker, session: Session, project: Path
) -> None:
    """Both submitters pass the DescribeTrainingJob check before either has created the job (planned
    and reserved in turn here, as they interleave in a race): the second is refused before it stages
    anything, and the first job's code is its own."""
    first = estimator(project, session)
    first_spec = first.plan("s3://my-bucket/d", job_name="raced")
    session.backend().reserve(first_spec)
    (project / "src" / "train.py").write_text("print('the other submitter')\n")
    with pytest.raises(JobNameTakenError) as caught:
        estimator(project, session).fit("s3://my-bucket/d", job_name="raced", wait=False)
    assert "another submitter" in str(caught.value) and "Fix: " in str(caught.value)
    s3 = aws.boto_session.client("s3")
    listed = s3.list_objects_v2(Bucket=DEFAULT_BUCKET, Prefix="raced/")
    assert [o["Key"] for o in listed.get("Contents", [])] == ["raced/source/.smlaunch-claim"]
    # The winner's release (its submit failed) frees the name for a later fit of the same name.
    session.backend().release(first_spec)
    estimator(project, session).fit("s3://my-bucket/d", job_name="raced", wait=False)
    code = s3.get_object(Bucket=DEFAULT_BUCKET, Key="raced/source/sourcedir.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(code)) as tar:
        member = tar.extractfile("train.py")
        assert member is not None and member.read() == b"print('the other submitter')\n"
