"""Channel delivery into emulated hosts' /opt/ml trees (smlaunch.sdk.backends.emulated.data), boto3 on moto.

Real scripts read the data in subprocesses: Pipe FIFOs epoch after epoch, File channels sharded across
hosts. FastFile mounts: tests/functional/test_fastfile.py.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from smlaunch.contract import channels as rules
from smlaunch.contract.transfer.engine import TransferEngine
from smlaunch.sdk.backends.emulated.data import JobData
from smlaunch.sdk.request.spec import TrainingJobSpec
from tests.functional._local_helpers import host_trees

N_OBJECTS = 12


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(var, value)


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="data")
        for i in range(N_OBJECTS):
            client.put_object(Bucket="data", Key=f"train/part-{i:02d}.txt", Body=f"record {i}\n" * (i + 1))
        yield client


def _spec(channel: dict[str, Any], mode: str = "File", hosts: int = 1) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate(
        {
            "TrainingJobName": "job",
            "AlgorithmSpecification": {"TrainingInputMode": mode},
            "RoleArn": "arn:aws:iam::000000000000:role/x",
            "OutputDataConfig": {"S3OutputPath": "file:///tmp/out"},
            "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": hosts},
            "InputDataConfig": [channel],
        }
    )


def _channel(uri: str, **extra: Any) -> dict[str, Any]:
    source = {
        "S3DataType": extra.pop("S3DataType", "S3Prefix"),
        "S3Uri": uri,
        "S3DataDistributionType": extra.pop("distribution", "FullyReplicated"),
    }
    return {"ChannelName": "train", "DataSource": {"S3DataSource": source}, **extra}


def _expected(i: int) -> bytes:
    return (f"record {i}\n" * (i + 1)).encode()


def test_file_mode_sharded_from_s3(s3: Any, tmp_path: Path) -> None:
    hosts = host_trees(tmp_path, 3)
    spec = _spec(_channel("s3://data/train", distribution="ShardedByS3Key"), hosts=3)
    data = JobData(spec, hosts, tmp_path / "cache", TransferEngine(s3, progress=False), lambda m: None)
    data.stage()
    seen: list[str] = []
    for index, paths in hosts:
        names = sorted(p.name for p in paths.channel_dir("train").iterdir())
        assert names == sorted(f"part-{i:02d}.txt" for i in range(N_OBJECTS))[index::3]
        for name in names:
            i = int(name[5:7])
            assert (paths.channel_dir("train") / name).read_bytes() == _expected(i)
        seen += names
    assert len(seen) == N_OBJECTS == len(set(seen))


def test_manifest_channel_expands_to_its_objects(s3: Any, tmp_path: Path) -> None:
    manifest = [{"prefix": "s3://data/train/"}, "part-03.txt", "part-07.txt"]
    s3.put_object(Bucket="data", Key="manifests/m.json", Body=json.dumps(manifest).encode())
    hosts = host_trees(tmp_path, 1)
    spec = _spec(_channel("s3://data/manifests/m.json", S3DataType="ManifestFile"))
    JobData(spec, hosts, tmp_path / "cache", TransferEngine(s3, progress=False), lambda m: None).stage()
    channel_dir = hosts[0][1].channel_dir("train")
    assert sorted(p.name for p in channel_dir.iterdir()) == ["part-03.txt", "part-07.txt"]
    assert (channel_dir / "part-07.txt").read_bytes() == _expected(7)
    s3.put_object(
        Bucket="data",
        Key="manifests/bad.json",
        Body=json.dumps([{"prefix": "s3://data/train/"}, "missing.txt"]).encode(),
    )
    spec = _spec(_channel("s3://data/manifests/bad.json", S3DataType="ManifestFile"))
    with pytest.raises(rules.ChannelError, match="does not exist"):
        JobData(spec, host_trees(tmp_path / "b", 1), tmp_path / "c2", TransferEngine(s3), print).stage()


PIPE_READER = textwrap.dedent("""
    import hashlib, json, os, sys
    data_dir, epochs = sys.argv[1], int(sys.argv[2])
    out = []
    for epoch in range(epochs):
        path = os.path.join(data_dir, f"train_{epoch}")
        with open(path, "rb") as fifo:      # blocks until the writer streams this epoch
            payload = fifo.read()
        out.append(hashlib.sha256(payload).hexdigest())
        # The next epoch's FIFO exists as soon as this one reported EOF.
        assert os.path.exists(os.path.join(data_dir, f"train_{epoch + 1}")), epoch
    print(json.dumps(out))
""")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("source", ["s3", "file"])
def test_pipe_mode_read_by_a_real_script(s3: Any, tmp_path: Path, source: str) -> None:
    if source == "file":
        root = tmp_path / "local-train"
        root.mkdir()
        for i in range(N_OBJECTS):
            (root / f"part-{i:02d}.txt").write_bytes(_expected(i))
        uri = root.as_uri()
    else:
        uri = "s3://data/train/"
    hosts = host_trees(tmp_path, 2)
    spec = _spec(
        _channel(uri, distribution="ShardedByS3Key", InputMode="Pipe", ShuffleConfig={"Seed": 7}),
        mode="File",
        hosts=2,
    )
    data = JobData(spec, hosts, tmp_path / "cache", TransferEngine(s3, progress=False), lambda m: None)
    data.stage()
    try:
        for index, paths in hosts:
            fifo = paths.pipe_path("train", 0)
            assert fifo.exists() and stat.S_ISFIFO(fifo.stat().st_mode)
            result = subprocess.run(
                [sys.executable, "-c", PIPE_READER, str(paths.input_data_dir), "3"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert result.returncode == 0, result.stderr
            digests = json.loads(result.stdout)
            share = list(range(N_OBJECTS))[index::2]
            for epoch, digest in enumerate(digests):
                order = rules.epoch_order(share, epoch, 7)
                assert digest == hashlib.sha256(b"".join(_expected(i) for i in order)).hexdigest()
            assert digests[0] != digests[1], "ShuffleConfig must reorder each epoch"
    finally:
        data.close(timeout=5)
    assert not data.errors
    assert all(not t.is_alive() for t in data._threads)


def _first_epoch(s3: Any, tmp_path: Path, channel: dict[str, Any]) -> bytes:
    """Stage one Pipe channel on one host and read its epoch-0 FIFO to the end."""
    hosts = host_trees(tmp_path, 1)
    engine = TransferEngine(s3, progress=False)
    data = JobData(_spec(channel), hosts, tmp_path / "cache", engine, lambda m: None)
    data.stage()
    try:
        with open(hosts[0][1].pipe_path("train", 0), "rb") as fifo:
            return fifo.read()
    finally:
        data.close(timeout=5)


def test_pipe_recordio_framing(s3: Any, tmp_path: Path) -> None:
    records = rules.read_recordio(
        _first_epoch(
            s3, tmp_path, _channel("s3://data/train/", InputMode="Pipe", RecordWrapperType="RecordIO")
        )
    )
    assert records == [_expected(i) for i in range(N_OBJECTS)]


def _gzip_objects(s3: Any) -> list[bytes]:
    """``gz/part-NN.txt.gz``: each record file gzip-compressed, the last one as two gzip members."""
    plain = [_expected(i) for i in range(4)]
    for i, body in enumerate(plain):
        data = gzip.compress(body) if i < 3 else gzip.compress(body[:5]) + gzip.compress(body[5:])
        s3.put_object(Bucket="data", Key=f"gz/part-{i:02d}.txt.gz", Body=data)
    return plain


@pytest.mark.timeout(60)
def test_pipe_mode_gzip_channel_is_decompressed_for_a_real_script(s3: Any, tmp_path: Path) -> None:
    plain = _gzip_objects(s3)
    hosts = host_trees(tmp_path, 1)
    spec = _spec(_channel("s3://data/gz/", InputMode="Pipe", CompressionType="Gzip"))
    data = JobData(spec, hosts, tmp_path / "cache", TransferEngine(s3, progress=False), lambda m: None)
    data.stage()
    try:
        result = subprocess.run(
            [sys.executable, "-c", PIPE_READER, str(hosts[0][1].input_data_dir), "2"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        data.close(timeout=5)
    assert result.returncode == 0, result.stderr
    expected = hashlib.sha256(b"".join(plain)).hexdigest()  # the records, not the .gz bytes
    assert json.loads(result.stdout) == [expected, expected]
    assert not data.errors


def test_pipe_gzip_with_recordio_frames_each_decompressed_object(s3: Any, tmp_path: Path) -> None:
    plain = _gzip_objects(s3)
    records = rules.read_recordio(
        _first_epoch(
            s3,
            tmp_path,
            _channel("s3://data/gz/", InputMode="Pipe", CompressionType="Gzip", RecordWrapperType="RecordIO"),
        )
    )
    assert records == plain


def test_pipe_gzip_object_that_is_not_gzip_fails_the_channel(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket="data", Key="notgz/part-00.txt.gz", Body=b"plain text, not gzip")
    hosts = host_trees(tmp_path, 1)
    spec = _spec(_channel("s3://data/notgz/", InputMode="Pipe", CompressionType="Gzip"))
    data = JobData(spec, hosts, tmp_path / "cache", TransferEngine(s3, progress=False), lambda m: None)
    data.stage()
    try:
        with open(hosts[0][1].pipe_path("train", 0), "rb") as fifo:
            assert fifo.read() == b""  # nothing undecodable reaches the script
        deadline = time.monotonic() + 10
        while not data.errors and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        data.close(timeout=5)
    assert len(data.errors) == 1
    assert "s3://data/notgz/part-00.txt.gz: not valid gzip data" in data.errors[0]
