"""``Session.upload_data`` / ``download_data`` and ``S3Uploader`` / ``S3Downloader`` against moto,
with the SageMaker SDK (2.257.7) doing the same transfers as the oracle for keys and return values."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smlaunch import LocalSession, S3Downloader, S3Uploader
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.sessions.sagemaker import Session
from tests.functional._sagemaker_moto import ACCOUNT, DEFAULT_BUCKET, REGION, FakeSageMaker, fake_aws

os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
BUCKET = "my-data-bucket"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSageMaker]:
    with fake_aws(monkeypatch) as fake:
        # The default bucket exists already: the SDK cannot create it when default_bucket_prefix is
        # set (it probes with ListObjectsV2, whose NoSuchBucket it does not expect).
        for bucket in (BUCKET, DEFAULT_BUCKET):
            fake.boto_session.client("s3").create_bucket(
                Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION}
            )
        yield fake


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    (root / "images" / "cats").mkdir(parents=True)
    (root / "train.csv").write_text("x,y\n1,2\n")
    (root / "images" / "cats" / "a.png").write_bytes(b"\x89PNG" + bytes(range(200)))
    (root / "images" / "b.png").write_bytes(b"\x89PNG" * 50)
    return root


def keys(aws: FakeSageMaker, bucket: str, prefix: str = "") -> list[str]:
    listing = aws.boto_session.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in listing.get("Contents", []))


def clear(aws: FakeSageMaker, bucket: str) -> None:
    s3 = aws.boto_session.client("s3")
    for key in keys(aws, bucket):
        s3.delete_object(Bucket=bucket, Key=key)


def sdk_session(aws: FakeSageMaker, **kwargs: Any) -> Any:
    sagemaker = pytest.importorskip("sagemaker")
    return sagemaker.Session(boto_session=aws.boto_session, **kwargs)


def ours(aws: FakeSageMaker, **kwargs: Any) -> Session:
    return Session(boto_session=aws.boto_session, **kwargs)


@pytest.mark.parametrize(
    ("bucket", "key_prefix", "prefix_setting"),
    [
        (BUCKET, "datasets/digits", None),
        (None, "data", None),
        (None, "train", "team-a"),
    ],
)
def test_upload_data_equals_the_sdk(
    aws: FakeSageMaker, data: Path, bucket: str | None, key_prefix: str, prefix_setting: str | None
) -> None:
    target = bucket or DEFAULT_BUCKET
    results = {}
    for name, session in (
        ("sdk", sdk_session(aws, default_bucket_prefix=prefix_setting)),
        ("ours", ours(aws, default_bucket_prefix=prefix_setting)),
    ):
        directory = session.upload_data(str(data), bucket, key_prefix)
        single = session.upload_data(str(data / "train.csv"), bucket, key_prefix)
        results[name] = (directory, single, keys(aws, target))
        clear(aws, target)
    assert results["ours"] == results["sdk"]
    directory, single, written = results["ours"]
    expected_prefix = "/".join(p for p in (prefix_setting, key_prefix) if p)
    assert directory == f"s3://{target}/{expected_prefix}"
    assert single == f"s3://{target}/{expected_prefix}/train.csv"
    assert f"{expected_prefix}/images/cats/a.png" in written


def test_uploads_to_the_default_bucket_say_whose_it_must_be(aws: FakeSageMaker, data: Path) -> None:
    s3 = aws.boto_session.client("s3")
    puts: list[dict[str, Any]] = []
    s3.meta.events.register("provide-client-params.s3.PutObject", lambda params, **_: puts.append(params))
    ours_session = Session(boto_session=aws.boto_session, s3_client=s3)
    ours_session.upload_data(str(data / "train.csv"))
    ours_session.upload_data(str(data / "train.csv"), BUCKET)
    assert [p.get("ExpectedBucketOwner") for p in puts] == [ACCOUNT, None]


def test_s3_uploader_and_downloader_equal_the_sdk(aws: FakeSageMaker, data: Path, tmp_path: Path) -> None:
    sdk_s3 = pytest.importorskip("sagemaker.s3")
    sdk, mine = sdk_session(aws), ours(aws)
    uri = f"s3://{BUCKET}/uploads/run-1"
    assert S3Uploader.upload(str(data), uri, sagemaker_session=mine) == uri
    ours_keys = keys(aws, BUCKET)
    clear(aws, BUCKET)
    assert sdk_s3.S3Uploader.upload(str(data), uri, sagemaker_session=sdk) == uri
    assert keys(aws, BUCKET) == ours_keys

    sdk_paths = sdk_s3.S3Downloader.download(uri, str(tmp_path / "sdk"), sagemaker_session=sdk)
    our_paths = S3Downloader.download(uri, tmp_path / "ours", sagemaker_session=mine)
    assert sorted(Path(p).relative_to(tmp_path / "ours") for p in our_paths) == sorted(
        Path(p).relative_to(tmp_path / "sdk") for p in sdk_paths
    )
    for path in our_paths:
        relative = Path(path).relative_to(tmp_path / "ours")
        assert Path(path).read_bytes() == (data / relative).read_bytes()
    one = S3Downloader.download(f"{uri}/images/b.png", tmp_path / "one", sagemaker_session=mine)
    assert one == [str(tmp_path / "one" / "b.png")]
    nothing = S3Downloader.download(f"s3://{BUCKET}/nothing/here", tmp_path / "none", sagemaker_session=mine)
    assert nothing == []


def test_kms_key_encrypts_uploads(aws: FakeSageMaker, data: Path) -> None:
    uri = S3Uploader.upload(
        str(data / "train.csv"), f"s3://{BUCKET}/secure", kms_key="alias/my-key", sagemaker_session=ours(aws)
    )
    head = aws.boto_session.client("s3").head_object(Bucket=BUCKET, Key="secure/train.csv")
    assert uri == f"s3://{BUCKET}/secure/train.csv"
    assert head["ServerSideEncryption"] == "aws:kms" and "my-key" in head["SSEKMSKeyId"]


def test_bad_arguments_are_refused(aws: FakeSageMaker, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="desired_s3_uri"):
        S3Uploader.upload(str(tmp_path), "my-bucket/prefix", sagemaker_session=ours(aws))
    with pytest.raises(ConfigurationError, match="no such file"):
        ours(aws).upload_data(str(tmp_path / "missing"), BUCKET)
    with pytest.raises(ConfigurationError, match="kms_key"):
        S3Downloader.download(f"s3://{BUCKET}/x", tmp_path, kms_key="k", sagemaker_session=ours(aws))
    with pytest.raises(ConfigurationError, match="no default bucket"):
        LocalSession(root=tmp_path / "jobs").upload_data(str(tmp_path))
    # A notebook's `bucket = sagemaker_session.default_bucket()` cell: the fix, not an AttributeError.
    with pytest.raises(ConfigurationError) as raised:
        LocalSession(root=tmp_path / "jobs").default_bucket()
    assert str(raised.value).startswith(
        "default_bucket()=None: a LocalSession has no default bucket (local jobs read local data in place)."
        " Fix: pass the local directory to fit() instead of uploading it, e.g. fit({'training': 'data'})"
    )


def test_a_local_session_uploads_to_a_named_bucket(aws: FakeSageMaker, data: Path, tmp_path: Path) -> None:
    session = LocalSession(root=tmp_path / "jobs", s3_client=aws.boto_session.client("s3"))
    assert session.upload_data(str(data), BUCKET, "local-run") == f"s3://{BUCKET}/local-run"
    assert keys(aws, BUCKET, "local-run/") == [
        "local-run/images/b.png",
        "local-run/images/cats/a.png",
        "local-run/train.csv",
    ]
    paths = session.download_data(str(tmp_path / "back"), BUCKET, "local-run")
    assert sorted(Path(p).name for p in paths) == ["a.png", "b.png", "train.csv"]
