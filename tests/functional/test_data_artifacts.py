"""Artifacts extras of local runs: uncompressed model upload (disable_output_compression),
intermediate output and TensorBoard output synced while the job runs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smlaunch import contract
from smlaunch.sdk.request.spec import OutputDataConfig, TensorBoardOutputConfig
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import (
    job_request,
    kill_leftover_jobs,
    make_spec,
    moto_s3_server,
    wait_terminal,
)

SCRIPT = """
import argparse, os, pathlib, time
parser = argparse.ArgumentParser()
parser.add_argument("--synced-to")
args = parser.parse_args()
host = os.environ["SM_CURRENT_HOST"]
pathlib.Path(os.environ["SM_MODEL_DIR"], f"weights-{host}.bin").write_bytes(host.encode())
(pathlib.Path(os.environ["SM_MODEL_DIR"]) / "sub").mkdir()
pathlib.Path(os.environ["SM_MODEL_DIR"], "sub", "config.json").write_text("{}")
if host == "algo-1":
    pathlib.Path(os.environ["SM_OUTPUT_INTERMEDIATE_DIR"], "progress.txt").write_text("epoch 1")
    # The copy must reach the output path while this script still runs.
    target = pathlib.Path(args.synced_to) / "progress.txt"
    deadline = time.time() + 30
    while not target.exists():
        if time.time() > deadline:
            raise SystemExit("intermediate output was not synced while the job ran")
        time.sleep(0.05)
    print("intermediate output synced while running", flush=True)
"""


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    kill_leftover_jobs(tmp_path / "jobs")


@pytest.mark.timeout(120)
def test_uncompressed_model_and_live_intermediate_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    intermediate = out / "raw-job" / "output" / "intermediate"
    spec = make_spec(
        tmp_path, "raw-job", SCRIPT, instance_count=2, hyperparameters={"synced-to": str(intermediate)}
    )
    spec = spec.model_copy(
        update={"OutputDataConfig": OutputDataConfig(S3OutputPath=out.as_uri(), CompressionType="NONE")}
    )
    backend = LocalSession(tmp_path / "jobs", stop_grace_seconds=2).backend()
    backend.submit(job_request(spec))
    description = wait_terminal(backend, "raw-job")
    log = "\n".join(backend.log_lines("raw-job"))
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, log
    assert "intermediate output synced while running" in log
    model_uri = description["ModelArtifacts"]["S3ModelArtifacts"]
    assert model_uri == (out / "raw-job" / "output").as_uri() + "/model/"
    model = out / "raw-job" / "output" / "model"
    files = {p.relative_to(model).as_posix(): p.read_bytes() for p in model.rglob("*") if p.is_file()}
    assert files == {
        "weights-algo-1.bin": b"algo-1",
        "weights-algo-2.bin": b"algo-2",
        "sub/config.json": b"{}",
    }
    assert not any(p.is_symlink() for p in model.rglob("*")), "uploaded files must be real copies"
    assert not (out / "raw-job" / "output" / "model.tar.gz").exists()
    assert (intermediate / "progress.txt").read_text() == "epoch 1"


TENSORBOARD_SCRIPT = """
import argparse, json, os, pathlib, time
parser = argparse.ArgumentParser()
parser.add_argument("--release")
args = parser.parse_args()
base = pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"])
config = json.loads((base / "input/config/tensorboardoutputconfig.json").read_text())
host = os.environ["SM_CURRENT_HOST"]
events = pathlib.Path(config["LocalPath"]) / "run" / f"events.out.tfevents.1700000000.{host}.{os.getpid()}"
events.parent.mkdir(parents=True, exist_ok=True)
with open(events, "ab") as handle:
    handle.write(b"step-1;")
    handle.flush()
    # Hold the job open until the test has seen this file in S3; then write more before ending.
    deadline = time.time() + 60
    while not os.path.exists(args.release):
        if time.time() > deadline:
            raise SystemExit("never released: the event file did not reach S3 while the job ran")
        time.sleep(0.05)
    handle.write(b"step-2;")
print("tensorboard events written", flush=True)
"""


def _tensorboard_objects(client: Any) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket="tb-bucket", Prefix="runs/tb-job/").get("Contents", [])
    return {o["Key"]: client.get_object(Bucket="tb-bucket", Key=o["Key"])["Body"].read() for o in listed}


@pytest.mark.timeout(150)
def test_tensorboard_output_reaches_s3_while_the_job_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = tmp_path / "release"
    with moto_s3_server(monkeypatch, "tb-bucket") as s3:
        spec = make_spec(
            tmp_path,
            "tb-job",
            TENSORBOARD_SCRIPT,
            instance_count=2,
            hyperparameters={"release": str(release)},
        )
        spec = spec.model_copy(
            update={
                "TensorBoardOutputConfig": TensorBoardOutputConfig(
                    S3OutputPath="s3://tb-bucket/runs/tb-job", LocalPath="/opt/ml/output/tb-logs"
                )
            }
        )
        backend = LocalSession(tmp_path / "jobs", s3_client=s3, stop_grace_seconds=2).backend()
        backend.submit(job_request(spec))
        deadline = time.monotonic() + 90
        while len(_tensorboard_objects(s3)) < 2:  # one event file per host
            assert backend.describe("tb-job")["TrainingJobStatus"] == contract.STATUS_IN_PROGRESS, "\n".join(
                backend.log_lines("tb-job")
            )
            assert time.monotonic() < deadline, "event files never reached S3"
            time.sleep(0.1)
        during = _tensorboard_objects(s3)
        assert backend.describe("tb-job")["TrainingJobStatus"] == contract.STATUS_IN_PROGRESS
        release.touch()
        description = wait_terminal(backend, "tb-job")
        log = "\n".join(backend.log_lines("tb-job"))
        assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, log
        assert description["TensorBoardOutputConfig"]["S3OutputPath"] == "s3://tb-bucket/runs/tb-job"
        after = _tensorboard_objects(s3)
    # Uploaded under S3OutputPath exactly as given (no job name added), the host tree's sub-folders kept.
    assert sorted(k.split(".")[-2] for k in during) == ["algo-1", "algo-2"]
    assert all(k.startswith("runs/tb-job/run/events.out.tfevents.1700000000.") for k in during)
    assert set(during.values()) == {b"step-1;"}
    assert after.keys() == during.keys() and set(after.values()) == {b"step-1;step-2;"}  # the final sync
