"""Data delivery end to end: ``PyTorch(...).fit()`` on the local backend, S3 on a moto server at
127.0.0.1, two emulated hosts: a ShardedByS3Key channel in Pipe mode and a FullyReplicated
ManifestFile channel in File mode, each read by the real training script. Bad manifests are refused
by ``fit()`` before anything of the job exists."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smlaunch import ConfigurationError, PyTorch, TrainingInput, contract
from smlaunch.sdk.errors import JobFailedError
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import (
    assert_no_job_processes,
    job_request,
    kill_leftover_jobs,
    moto_s3_server,
)

N_OBJECTS = 9

SCRIPT = """
import hashlib, json, os, pathlib
base = pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"])
host = os.environ["SM_CURRENT_HOST"]
config = json.loads((base / "input/config/inputdataconfig.json").read_text())
with open(base / "input/data/train_0", "rb") as fifo:
    streamed = fifo.read()
val = sorted(p.name for p in pathlib.Path(os.environ["SM_CHANNEL_VAL"]).iterdir())
pathlib.Path(os.environ["SM_MODEL_DIR"], f"{host}.json").write_text(json.dumps({
    "modes": {k: v["TrainingInputMode"] for k, v in config.items()},
    "streamed": streamed.decode(), "val": val}))
"""


def _body(i: int) -> bytes:
    return f"<{i}>".encode()


@pytest.fixture
def moto_s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with moto_s3_server(monkeypatch, "data") as client:
        for i in range(N_OBJECTS):
            client.put_object(Bucket="data", Key=f"train/part-{i}.txt", Body=_body(i))
        manifest = [{"prefix": "s3://data/train/"}, "part-1.txt", "part-4.txt"]
        client.put_object(Bucket="data", Key="val.manifest", Body=json.dumps(manifest).encode())
        yield client


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


def _estimator(
    tmp_path: Path, session: LocalSession, script: str = SCRIPT, instance_count: int = 2
) -> PyTorch:
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text(script)
    return PyTorch(
        entry_point="train.py",
        source_dir=str(source),
        role="arn:aws:iam::111122223333:role/r",
        instance_type="ml.c5.xlarge",
        instance_count=instance_count,
        framework_version="2.1.0",
        py_version="py310",
        output_path=(tmp_path / "out").as_uri(),
        sagemaker_session=session,
    )


@pytest.mark.timeout(150)
def test_pipe_sharded_and_manifest_channels_through_fit(tmp_path: Path, moto_s3: Any) -> None:
    session = LocalSession(tmp_path / "jobs", s3_client=moto_s3, stop_grace_seconds=5)
    estimator = _estimator(tmp_path, session)
    estimator.fit(
        {
            "train": TrainingInput("s3://data/train/", distribution="ShardedByS3Key", input_mode="Pipe"),
            "val": TrainingInput("s3://data/val.manifest", s3_data_type="ManifestFile"),
        },
        logs=False,
        job_name="pipe-e2e",
    )
    job = estimator.latest_training_job
    assert job is not None
    description = job.describe()
    log = "\n".join(session.backend().log_lines("pipe-e2e"))
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, log
    with tarfile.open(description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")) as tar:
        reports = {
            m.name: json.loads(tar.extractfile(m).read())
            for m in tar.getmembers()  # type: ignore[union-attr]
            if m.isfile()
        }
    keys = sorted(f"part-{i}.txt" for i in range(N_OBJECTS))
    for index, host in enumerate(["algo-1", "algo-2"]):
        report = reports[f"{host}.json"]
        assert report["modes"] == {"train": "Pipe", "val": "File"}  # the real modes, not always File
        share = keys[index::2]
        assert report["streamed"] == "".join(f"<{k[5:-4]}>" for k in share)
        assert report["val"] == ["part-1.txt", "part-4.txt"]
    assert_no_job_processes("pipe-e2e", tmp_path / "jobs" / "pipe-e2e")


@pytest.mark.parametrize(
    ("body", "problem", "fix"),
    [
        (
            b'{"prefix": "s3://data/train/"}',
            "not a valid manifest: manifest {uri} must be a JSON list",
            "write it as a JSON list",
        ),
        (
            b'[{"prefix": "s3://data/train/"}, "part-1.txt"',
            "not a valid manifest: manifest {uri} is not JSON",
            "write it as a JSON list",
        ),
        (
            json.dumps([{"prefix": "s3://data/train/"}, "part-1.txt", "part-77.txt", "gone/x.txt"]).encode(),
            "manifest {uri} names s3://data/train/part-77.txt, which does not exist "
            "(and 1 more missing: s3://data/train/gone/x.txt)",
            "upload the missing object(s), or remove them",
        ),
        (None, "the manifest cannot be read (NoSuchKey: ", "check the manifest's URI"),
    ],
    ids=["not-a-list", "not-json", "missing-objects", "no-manifest"],
)
def test_bad_manifest_fails_fit_before_anything_of_the_job_exists(
    tmp_path: Path, moto_s3: Any, body: bytes | None, problem: str, fix: str
) -> None:
    key = f"manifests/{tmp_path.name}.json"  # moto keeps objects between tests of one process
    uri = f"s3://data/{key}"
    if body is not None:
        moto_s3.put_object(Bucket="data", Key=key, Body=body)
    session = LocalSession(tmp_path / "jobs", s3_client=moto_s3)
    estimator = _estimator(tmp_path, session)
    inputs = {
        "train": TrainingInput("s3://data/train/"),  # a good channel first: nothing is downloaded
        "val": TrainingInput(uri, s3_data_type="ManifestFile"),
    }
    with pytest.raises(ConfigurationError) as caught:
        estimator.fit(inputs, logs=False, job_name="bad-manifest")
    error = caught.value
    assert error.field == "inputs['val']" and error.value == uri
    assert problem.format(uri=uri) in error.problem and fix in error.fix
    assert not (tmp_path / "jobs" / "bad-manifest").exists()  # no job directory, no hosts, no code staged
    assert estimator.latest_training_job is None

    spec = estimator.plan(inputs, job_name="bad-manifest")
    with pytest.raises(ConfigurationError, match="inputs\\['val'\\]"):
        session.backend().submit(job_request(spec))  # the backend's own submit checks it too
    assert not (tmp_path / "jobs" / "bad-manifest").exists()


def test_augmented_manifest_is_refused_before_anything_starts(tmp_path: Path, moto_s3: Any) -> None:
    session = LocalSession(tmp_path / "jobs", s3_client=moto_s3)
    estimator = _estimator(tmp_path, session)
    with pytest.raises(ConfigurationError) as caught:
        estimator.fit(
            {
                "val": TrainingInput(
                    "s3://data/val.manifest",
                    s3_data_type="AugmentedManifestFile",
                    attribute_names=["source-ref"],
                    input_mode="Pipe",
                )
            },
            logs=False,
            job_name="augmented",
        )
    assert caught.value.field == "inputs['val'].s3_data_type"
    assert caught.value.value == "AugmentedManifestFile" and "not emulated locally" in caught.value.problem
    assert not (tmp_path / "jobs" / "augmented").exists()


WAITING_READER = """
import os, pathlib, time
base = pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"])
with open(base / "input/data/train_0", "rb") as fifo:
    print(f"epoch 0: {len(fifo.read())} bytes", flush=True)
time.sleep(120)  # a script that would wait for more data: the job must not
print("woke up", flush=True)
"""


@pytest.mark.timeout(150)
def test_a_failing_pipe_channel_fails_the_job_promptly(tmp_path: Path, moto_s3: Any) -> None:
    moto_s3.put_object(Bucket="data", Key="notgz/part-0.gz", Body=b"plain text, not gzip")
    session = LocalSession(tmp_path / "jobs", s3_client=moto_s3, stop_grace_seconds=30)
    estimator = _estimator(tmp_path, session, WAITING_READER, instance_count=1)
    estimator.fit(
        {"train": TrainingInput("s3://data/notgz/", input_mode="Pipe", compression="Gzip")},
        wait=False,
        job_name="bad-pipe",
    )
    job = estimator.latest_training_job
    assert job is not None
    with pytest.raises(JobFailedError):
        job.wait(logs=False)
    description = job.describe()
    assert description["TrainingJobStatus"] == contract.STATUS_FAILED
    reason = description["FailureReason"]
    assert reason.startswith("ClientError: Data download failed: Pipe channel 'train' on algo-1")
    assert "s3://data/notgz/part-0.gz: not valid gzip data" in reason
    # Ended by the agent (SIGTERM to the host), not by the script finishing its wait.
    log = "\n".join(session.backend().log_lines("bad-pipe"))
    assert "epoch 0: 0 bytes" in log and "Data download failed: ending every host" in log
    assert "woke up" not in log
    assert_no_job_processes("bad-pipe", tmp_path / "jobs" / "bad-pipe")
