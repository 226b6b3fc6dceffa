"""FastFile channels as SageMaker mounts them: a read-only FUSE mount per host and channel that lists
the host's whole share at once and fetches each object on first read (S3 on a moto server, the
mounts served by ``python -m smlaunch.sdk.backends.emulated.fastfile``);
File semantics where FUSE is unavailable."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smlaunch import PyTorch, TrainingInput, contract
from smlaunch.contract.transfer.engine import TransferEngine
from smlaunch.sdk.backends.emulated import data as local_data
from smlaunch.sdk.backends.emulated import fastfile
from smlaunch.sdk.backends.emulated.data import JobData
from smlaunch.sdk.errors import JobFailedError
from smlaunch.sdk.request.spec import TrainingJobSpec
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import (
    assert_no_job_processes,
    host_trees,
    kill_leftover_jobs,
    moto_s3_server,
)

N_OBJECTS = 28
KEYS = sorted(f"train/{'nested/deeper/' if i % 3 == 0 else ''}part-{i:02d}.bin" for i in range(N_OBJECTS))
FUSE_MISSING = fastfile.unavailable()
needs_fuse = pytest.mark.skipif(FUSE_MISSING is not None, reason=f"FUSE unavailable: {FUSE_MISSING}")


def _body(key: str) -> bytes:
    return (key.encode() + b"\n") * (1 + len(key) * 37 % 500)


@pytest.fixture
def moto_s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with moto_s3_server(monkeypatch, "fastfile") as client:
        for key in KEYS:
            client.put_object(Bucket="fastfile", Key=key, Body=_body(key))
        yield client


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _spec(hosts: int, distribution: str) -> TrainingJobSpec:
    source = {
        "S3DataType": "S3Prefix",
        "S3Uri": "s3://fastfile/train/",
        "S3DataDistributionType": distribution,
    }
    return TrainingJobSpec.model_validate(
        {
            "TrainingJobName": "job",
            "AlgorithmSpecification": {"TrainingInputMode": "FastFile"},
            "RoleArn": "arn:aws:iam::000000000000:role/x",
            "OutputDataConfig": {"S3OutputPath": "file:///tmp/out"},
            "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": hosts},
            "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": source}}],
        }
    )


def _tree(root: Path) -> dict[str, int]:
    """Every file under ``root`` (walked once, as a script at start would) with the size stat reports."""
    found = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            found[str(path.relative_to(root))] = path.stat().st_size
    return found


@needs_fuse
@pytest.mark.timeout(120)
def test_each_host_lists_its_whole_share_at_once_and_reads_on_demand(tmp_path: Path, moto_s3: Any) -> None:
    hosts = host_trees(tmp_path, 2)
    logged: list[str] = []
    data = JobData(
        _spec(2, "ShardedByS3Key"),
        hosts,
        tmp_path / "cache",
        TransferEngine(moto_s3, progress=False),
        logged.append,
    )
    data.stage()
    rels = [key.removeprefix("train/") for key in KEYS]
    try:
        cache = tmp_path / "cache" / "train"
        for index, paths in hosts:
            channel = paths.channel_dir("train")
            assert os.path.ismount(channel)
            share = sorted(rels)[index::2]
            # The whole share, with sizes, before one byte was fetched.
            assert _tree(channel) == {rel: len(_body(f"train/{rel}")) for rel in share}
            assert not any((cache / rel).exists() for rel in share)
            first = share[0]
            assert (channel / first).read_bytes() == _body(f"train/{first}")
            assert (cache / first).is_file()  # fetched on its first read, into the job's cache
            assert not (cache / share[1]).exists()
            for rel in share:
                assert (channel / rel).read_bytes() == _body(f"train/{rel}")
            with pytest.raises(OSError) as refused:
                (channel / first).write_bytes(b"x")
            assert refused.value.errno in (errno.EROFS, errno.EACCES)
        assert any("FastFile mounted on 2 host(s)" in line for line in logged), logged
    finally:
        data.close()
    for _, paths in hosts:
        assert not os.path.ismount(paths.channel_dir("train"))
    assert data.errors == []


@needs_fuse
@pytest.mark.timeout(120)
def test_an_object_that_vanished_fails_the_read_and_the_channel(tmp_path: Path, moto_s3: Any) -> None:
    hosts = host_trees(tmp_path, 1)
    data = JobData(
        _spec(1, "FullyReplicated"),
        hosts,
        tmp_path / "cache",
        TransferEngine(moto_s3, progress=False),
        lambda _: None,
    )
    data.stage()
    try:
        moto_s3.delete_object(Bucket="fastfile", Key=KEYS[0])
        with pytest.raises(OSError) as failed:
            (hosts[0][1].channel_dir("train") / KEYS[0].removeprefix("train/")).read_bytes()
        assert failed.value.errno == errno.EIO
    finally:
        data.close()
    assert len(data.errors) == 1 and f"s3://fastfile/{KEYS[0]}" in data.errors[0], data.errors


@pytest.mark.parametrize(
    ("unavailable", "server", "reason"),
    [
        ("/dev/fuse does not exist", None, "/dev/fuse does not exist"),
        (None, "/bin/false", "the FUSE server exited with code 1: no output"),  # a server that cannot start
    ],
    ids=["no-fuse", "mount-fails"],
)
@pytest.mark.timeout(120)
def test_without_a_mount_fastfile_has_file_semantics_and_says_why(
    tmp_path: Path,
    moto_s3: Any,
    monkeypatch: pytest.MonkeyPatch,
    unavailable: str | None,
    server: str | None,
    reason: str,
) -> None:
    monkeypatch.setattr(local_data.fastfile, "unavailable", lambda: unavailable)
    if server is not None:
        monkeypatch.setattr(local_data.sys, "executable", server)
    hosts = host_trees(tmp_path, 2)
    logged: list[str] = []
    data = JobData(
        _spec(2, "ShardedByS3Key"),
        hosts,
        tmp_path / "cache",
        TransferEngine(moto_s3, progress=False),
        logged.append,
    )
    data.stage()
    data.close()
    rels = sorted(key.removeprefix("train/") for key in KEYS)
    for index, paths in hosts:
        channel = paths.channel_dir("train")
        assert not os.path.ismount(channel)
        assert _tree(channel) == {rel: len(_body(f"train/{rel}")) for rel in rels[index::2]}
        assert all((channel / rel).read_bytes() == _body(f"train/{rel}") for rel in rels[index::2])
    assert any(
        f"FastFile cannot be mounted here ({reason}); delivering it with File semantics" in line
        for line in logged
    ), logged


SCRIPT = """
import argparse, hashlib, json, os
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
data_dir = os.environ["SM_CHANNEL_TRAIN"]
listed = sorted(os.path.relpath(os.path.join(d, f), data_dir) for d, _, fs in os.walk(data_dir) for f in fs)
digests = {rel: hashlib.sha256(open(os.path.join(data_dir, rel), "rb").read()).hexdigest() for rel in listed}
host = os.environ["SM_CURRENT_HOST"]
with open(os.path.join(os.environ["SM_MODEL_DIR"], host + ".json"), "w") as out:
    json.dump({"listed": listed, "digests": digests, "mounted": os.path.ismount(data_dir)}, out)
"""


def _fit(
    tmp_path: Path, moto_s3: Any, script: str, job_name: str, hosts: int, distribution: str
) -> tuple[dict[str, Any], str]:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(script)
    session = LocalSession(tmp_path / "jobs", s3_client=moto_s3, stop_grace_seconds=5)
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/r",
        instance_type="ml.c5.xlarge",
        instance_count=hosts,
        framework_version="2.1.0",
        py_version="py310",
        hyperparameters={"epochs": 1},
        output_path=(tmp_path / "out").as_uri(),
        sagemaker_session=session,
    )
    channel = TrainingInput("s3://fastfile/train/", distribution=distribution, input_mode="FastFile")
    with contextlib.suppress(JobFailedError):
        estimator.fit({"train": channel}, logs=False, job_name=job_name)
    return session.backend().describe(job_name), "\n".join(session.backend().log_lines(job_name))


@needs_fuse
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_fit_with_a_sharded_fastfile_channel(tmp_path: Path, moto_s3: Any) -> None:
    import hashlib

    description, log = _fit(tmp_path, moto_s3, SCRIPT, "fastfile-e2e", 2, "ShardedByS3Key")
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, log
    assert "FastFile mounted on 2 host(s)" in log
    with tarfile.open(description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")) as tar:
        reports = {
            m.name: json.loads(tar.extractfile(m).read())  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }
    rels = sorted(key.removeprefix("train/") for key in KEYS)
    for index, host in enumerate(["algo-1", "algo-2"]):
        report = reports[f"{host}.json"]
        assert report["mounted"] is True
        assert report["listed"] == rels[index::2]  # the whole share at the script's first look
        assert report["digests"] == {
            rel: hashlib.sha256(_body(f"train/{rel}")).hexdigest() for rel in rels[index::2]
        }
    job_dir = tmp_path / "jobs" / "fastfile-e2e"
    assert_no_job_processes("fastfile-e2e", job_dir)
    assert not any(os.path.ismount(job_dir / "hosts" / h / "input/data/train") for h in ("algo-1", "algo-2"))


VANISHING = """
import os, boto3
data_dir = os.environ["SM_CHANNEL_TRAIN"]
assert "part-01.bin" in os.listdir(data_dir)
boto3.client("s3").delete_object(Bucket="fastfile", Key="train/part-01.bin")
open(os.path.join(data_dir, "part-01.bin"), "rb").read()
"""


@needs_fuse
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_object_gone_before_its_first_read_fails_the_job(tmp_path: Path, moto_s3: Any) -> None:
    description, log = _fit(tmp_path, moto_s3, VANISHING, "fastfile-gone", 1, "FullyReplicated")
    assert description["TrainingJobStatus"] == contract.STATUS_FAILED, log
    reason = description["FailureReason"]
    assert "[Errno 5] Input/output error" in reason or "Data download failed" in reason, reason
    assert "ERROR FastFile channel 'train': s3://fastfile/train/part-01.bin: TransferVerificationError" in log
    job_dir = tmp_path / "jobs" / "fastfile-gone"
    assert_no_job_processes("fastfile-gone", job_dir)
    assert not os.path.ismount(job_dir / "hosts" / "algo-1" / "input/data/train")
