"""Session against moto: region, account, default bucket, role, credentials, input staging, listing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from smlaunch.sdk.backends.sagemaker.backend import SageMakerBackend
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.sessions.sagemaker import Session
from tests.functional._sagemaker_moto import (
    ACCOUNT,
    DEFAULT_BUCKET,
    OTHER_ACCOUNT,
    REGION,
    ROLE_ARN,
    ROLE_NAME,
    FakeSageMaker,
    aws_test_env,
    fake_aws,
)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSageMaker]:
    with fake_aws(monkeypatch) as fake:
        yield fake


class Calls:
    """Records the API parameters of every call a client makes (after boto3's validation)."""

    def __init__(self, client: Any) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        client.meta.events.register("provide-client-params.*.*", self._record)

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, dict(params)))

    def named(self, operation: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == operation]


def test_region_account_and_generated_bucket_created_once(aws: FakeSageMaker) -> None:
    s3 = aws.boto_session.client("s3")
    calls = Calls(s3)
    session = Session(boto_session=aws.boto_session, s3_client=s3)

    assert session.region_name == REGION
    assert session.account_id == ACCOUNT
    assert session.default_output_path() == f"s3://{DEFAULT_BUCKET}/"
    assert session.default_output_path() == f"s3://{DEFAULT_BUCKET}/"  # no second round trip

    assert s3.get_bucket_location(Bucket=DEFAULT_BUCKET)["LocationConstraint"] == REGION
    assert calls.named("CreateBucket") == [
        {"Bucket": DEFAULT_BUCKET, "CreateBucketConfiguration": {"LocationConstraint": REGION}}
    ]
    # The generated name is checked against our account (bucket squatting defence).
    assert {"Bucket": DEFAULT_BUCKET, "ExpectedBucketOwner": ACCOUNT} in calls.named("HeadBucket")
    assert session.is_local is False


def test_existing_bucket_is_reused_not_recreated(aws: FakeSageMaker) -> None:
    s3 = aws.boto_session.client("s3")
    s3.create_bucket(Bucket=DEFAULT_BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    calls = Calls(s3)
    assert Session(boto_session=aws.boto_session, s3_client=s3).default_bucket() == DEFAULT_BUCKET
    assert calls.named("CreateBucket") == []


def test_us_east_1_bucket_has_no_location_constraint(monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_aws(monkeypatch, role=False):
        boto_session = boto3.Session(region_name="us-east-1")
        s3 = boto_session.client("s3")
        calls = Calls(s3)
        session = Session(boto_session=boto_session, s3_client=s3)
        assert session.default_bucket() == f"sagemaker-us-east-1-{ACCOUNT}"
        assert calls.named("CreateBucket") == [{"Bucket": f"sagemaker-us-east-1-{ACCOUNT}"}]


def test_user_bucket_and_prefix(aws: FakeSageMaker) -> None:
    s3 = aws.boto_session.client("s3")
    calls = Calls(s3)
    session = Session(
        boto_session=aws.boto_session,
        default_bucket="my-team-bucket",
        default_bucket_prefix="/projects/bert/",
        s3_client=s3,
    )
    assert session.default_output_path() == "s3://my-team-bucket/projects/bert/"
    assert s3.head_bucket(Bucket="my-team-bucket")["ResponseMetadata"]["HTTPStatusCode"] == 200
    # A bucket the user named is theirs: no owner check, and uploads carry no ExpectedBucketOwner.
    assert all("ExpectedBucketOwner" not in params for params in calls.named("HeadBucket"))
    assert session.bucket_owner_args("my-team-bucket") == {}


def test_bucket_owned_by_another_account_is_refused(
    aws: FakeSageMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOTO_ACCOUNT_ID", OTHER_ACCOUNT)
    aws.boto_session.client("s3").create_bucket(
        Bucket=DEFAULT_BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    monkeypatch.delenv("MOTO_ACCOUNT_ID")
    session = Session(boto_session=aws.boto_session)

    with pytest.raises(ConfigurationError) as error:
        session.default_output_path()
    assert error.value.field == "default_bucket"
    assert error.value.value == DEFAULT_BUCKET
    assert f"not owned by account {ACCOUNT}" in str(error.value)
    assert "default_bucket=" in str(error.value.fix)


def test_bad_bucket_name_is_refused_before_any_call() -> None:
    with pytest.raises(ConfigurationError) as error:
        Session(default_bucket="s3://my-bucket")
    assert error.value.field == "default_bucket"


def test_role_arn_kept_name_resolved_missing_refused(aws: FakeSageMaker) -> None:
    iam = aws.boto_session.client("iam")
    calls = Calls(iam)
    session = Session(boto_session=aws.boto_session, iam_client=iam)

    assert session.expand_role(ROLE_ARN) == ROLE_ARN
    assert calls.named("GetRole") == []  # an ARN needs no lookup
    assert session.expand_role(ROLE_NAME) == ROLE_ARN

    with pytest.raises(ConfigurationError) as missing:
        session.expand_role("NoSuchRole")
    assert (missing.value.field, missing.value.value) == ("role", "NoSuchRole")
    assert "no IAM role" in str(missing.value)
    for bad in (None, "", "arn:aws:iam::12:user/bob"):
        with pytest.raises(ConfigurationError) as error:
            session.expand_role(bad)
        assert error.value.field == "role"


def test_no_credentials_is_one_clear_error_not_a_botocore_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    # Not under mock_aws (it provides fake credentials); botocore refuses to sign before sending.
    aws_test_env(monkeypatch, credentials=False)
    session = Session(boto_session=boto3.Session(region_name=REGION))
    assert session.region_name == REGION  # nothing needs credentials before a call
    with pytest.raises(ConfigurationError) as error:
        session.default_output_path()
    message = str(error.value)
    assert error.value.field == "credentials"
    assert "aws configure" in message and "LocalSession()" in message
    assert error.value.__cause__ is None and error.value.__suppress_context__


def test_no_credentials_with_an_injected_client(monkeypatch: pytest.MonkeyPatch) -> None:
    aws_test_env(monkeypatch, credentials=False)
    sts = boto3.Session(region_name=REGION).client("sts")
    with pytest.raises(ConfigurationError) as error:
        _ = Session(sts_client=sts).account_id
    assert error.value.field == "credentials"


def test_no_region_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    aws_test_env(monkeypatch)
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(ConfigurationError) as error:
        _ = Session(boto_session=boto3.Session()).region_name
    assert error.value.field == "region"
    assert "AWS_DEFAULT_REGION" in str(error.value.fix)


def test_clients_are_lazy_injectable_and_backend_is_sagemaker(aws: FakeSageMaker) -> None:
    sagemaker = aws.boto_session.client("sagemaker")
    session = Session(boto_session=aws.boto_session, sagemaker_client=sagemaker)
    assert session.sagemaker_client() is sagemaker
    assert session.logs_client() is session.logs_client()  # created once, on first use
    assert session.logs_client().meta.region_name == REGION
    backend = session.backend()
    assert isinstance(backend, SageMakerBackend) and session.backend() is backend
    assert backend.capabilities.interrupt_stops_job is False
    # Region also comes from injected clients when no boto session is given.
    assert Session(sagemaker_client=sagemaker).region_name == REGION


def _tree(root: Path) -> dict[str, bytes]:
    files = {"a.csv": b"x,y\n1,2\n", "nested/b.bin": bytes(range(256)) * 100, "nested/deeper/c.txt": b"c"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def test_stage_local_input_uploads_once_with_sse_and_owner(aws: FakeSageMaker, tmp_path: Path) -> None:
    files = _tree(tmp_path / "train")
    s3 = aws.boto_session.client("s3")
    session = Session(boto_session=aws.boto_session, s3_client=s3)
    calls = Calls(s3)

    uri = session.stage_local_input(tmp_path / "train", "job-1", "train")
    assert uri == f"s3://{DEFAULT_BUCKET}/job-1/input/train/"
    listed = s3.list_objects_v2(Bucket=DEFAULT_BUCKET, Prefix="job-1/input/train/")["Contents"]
    assert sorted(o["Key"] for o in listed) == sorted(f"job-1/input/train/{rel}" for rel in files)
    for rel, data in files.items():
        obj = s3.get_object(Bucket=DEFAULT_BUCKET, Key=f"job-1/input/train/{rel}")
        assert obj["Body"].read() == data
        assert obj["ServerSideEncryption"] == "aws:kms"
        assert any(len(v) == 64 for v in obj["Metadata"].values())  # content hash travels with it
    puts = calls.named("PutObject") + calls.named("CreateMultipartUpload")
    assert len(puts) == len(files)
    assert all(p["ExpectedBucketOwner"] == ACCOUNT and p["ServerSideEncryption"] == "aws:kms" for p in puts)

    # Same content again: nothing is re-sent. One file changed: only that one.
    calls.calls.clear()
    session.stage_local_input(tmp_path / "train", "job-1", "train")
    assert calls.named("PutObject") == []
    (tmp_path / "train" / "a.csv").write_bytes(b"x,y\n3,4\n")
    session.stage_local_input(tmp_path / "train", "job-1", "train")
    assert [p["Key"] for p in calls.named("PutObject")] == ["job-1/input/train/a.csv"]


def test_stage_single_file_and_missing_path(aws: FakeSageMaker, tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("1,2\n")
    session = Session(boto_session=aws.boto_session, default_bucket_prefix="pre")
    uri = session.stage_local_input(tmp_path / "data.csv", "job-2", "test")
    assert uri == f"s3://{DEFAULT_BUCKET}/pre/job-2/input/test/"
    s3 = aws.boto_session.client("s3")
    staged = s3.get_object(Bucket=DEFAULT_BUCKET, Key="pre/job-2/input/test/data.csv")
    assert staged["Body"].read() == b"1,2\n"

    with pytest.raises(ConfigurationError) as error:
        session.stage_local_input(tmp_path / "nope", "job-2", "train")
    assert error.value.field == "inputs['train']"


def test_list_training_jobs_filters_and_limits(aws: FakeSageMaker) -> None:
    sagemaker = aws.boto_session.client("sagemaker")
    for name in ("bert-a", "bert-b", "resnet-a"):
        sagemaker.create_training_job(
            TrainingJobName=name,
            RoleArn=ROLE_ARN,
            AlgorithmSpecification={"TrainingImage": "img:1", "TrainingInputMode": "File"},
            OutputDataConfig={"S3OutputPath": "s3://b/"},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 30},
            StoppingCondition={"MaxRuntimeInSeconds": 60},
        )
    session = Session(boto_session=aws.boto_session)
    names = [job["TrainingJobName"] for job in session.list_training_jobs()]
    assert sorted(names) == ["bert-a", "bert-b", "resnet-a"]
    assert sorted(j["TrainingJobName"] for j in session.list_training_jobs(name_contains="bert")) == [
        "bert-a",
        "bert-b",
    ]
    assert len(session.list_training_jobs(max_results=2)) == 2
    aws.complete("bert-b")
    assert [j["TrainingJobName"] for j in session.list_training_jobs(status="Completed")] == ["bert-b"]
