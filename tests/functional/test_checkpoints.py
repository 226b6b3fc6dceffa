"""Checkpoint restore and sync (smlaunch.sdk.backends.emulated.checkpoints.DirectorySync), boto3 on moto;
and a job whose ``checkpoint_local_path`` is not the default."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from smlaunch import contract
from smlaunch.contract.transfer.engine import TransferEngine
from smlaunch.sdk.backends.emulated.backend import LocalBackend
from smlaunch.sdk.backends.emulated.checkpoints import DirectorySync
from smlaunch.sdk.request.spec import CheckpointConfig
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import (
    job_request,
    kill_leftover_jobs,
    make_spec,
    moto_s3_server,
    wait_terminal,
)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for var, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(var, value)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="ckpt")
        yield client


def _keys(client: Any) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket="ckpt", Prefix="run/").get("Contents", [])
    return {o["Key"]: client.get_object(Bucket="ckpt", Key=o["Key"])["Body"].read() for o in listed}


def _age(path: Path, seconds: float) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


def test_restore_into_every_host_then_sync_new_and_changed(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket="ckpt", Key="run/epoch-1.pt", Body=b"one")
    s3.put_object(Bucket="ckpt", Key="run/sub/state.json", Body=b"{}")
    hosts = {"algo-1": tmp_path / "h1" / "checkpoints", "algo-2": tmp_path / "h2" / "checkpoints"}
    logs: list[str] = []
    sync = DirectorySync(
        TransferEngine(s3, progress=False), "s3://ckpt/run", hosts, logs.append, settle=5.0, deletions=True
    )
    assert sync.restore() == 2
    for directory in hosts.values():
        assert (directory / "epoch-1.pt").read_bytes() == b"one"
        assert (directory / "sub" / "state.json").read_bytes() == b"{}"

    h1 = hosts["algo-1"]
    (h1 / "epoch-2.pt").write_bytes(b"two")  # new, settled
    _age(h1 / "epoch-2.pt", 10)
    (h1 / "sub" / "state.json").write_bytes(b'{"e": 2}')  # changed, settled
    _age(h1 / "sub" / "state.json", 10)
    (h1 / "epoch-3.pt").write_bytes(b"being written")  # too fresh: debounced
    (h1 / "epoch-1.pt").unlink()  # deleted on one host
    s3.put_object(Bucket="ckpt", Key="run/late.pt", Body=b"late")  # added after the start
    summary = sync.sync()
    assert sorted(summary.transferred) == ["s3://ckpt/run/epoch-2.pt", "s3://ckpt/run/sub/state.json"]
    assert sync.deleted == ["epoch-1.pt"]
    assert "run/epoch-3.pt" not in _keys(s3)
    assert "run/epoch-1.pt" not in _keys(s3)

    sync.stop()  # the final sync sends everything, settled or not
    assert _keys(s3) == {  # deleted in a container, so deleted in S3, as SageMaker does
        "run/epoch-2.pt": b"two",
        "run/late.pt": b"late",  # no host ever had it: never deleted by this job
        "run/epoch-3.pt": b"being written",
        "run/sub/state.json": b'{"e": 2}',
    }


def test_background_sync_uploads_while_running(s3: Any, tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    sync = DirectorySync(
        TransferEngine(s3, progress=False),
        "s3://ckpt/run/",
        {"algo-1": directory},
        lambda m: None,
        interval=0.05,
        settle=0.05,
    )
    sync.start()
    try:
        (directory / "model.pt").write_bytes(b"weights")
        deadline = time.monotonic() + 20
        while "run/model.pt" not in _keys(s3):
            assert time.monotonic() < deadline, "the background sync never uploaded the checkpoint"
            time.sleep(0.05)
    finally:
        sync.stop()
    assert not sync.errors


def test_deletions_after_upload_and_on_a_file_uri(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "a").mkdir(parents=True)
    (store / "a" / "x.bin").write_bytes(b"x")
    local = tmp_path / "host" / "checkpoints"
    sync = DirectorySync(
        TransferEngine(progress=False), store.as_uri(), {"algo-1": local}, lambda m: None, deletions=True
    )
    sync.restore()
    assert (local / "a" / "x.bin").read_bytes() == b"x"
    (local / "y.bin").write_bytes(b"y")
    sync.sync(final=True)
    assert (store / "y.bin").read_bytes() == b"y"
    (local / "y.bin").unlink()  # uploaded by this job, then deleted
    (local / "a" / "x.bin").unlink()  # restored, then deleted
    sync.stop()
    assert not (store / "y.bin").exists()
    assert not (store / "a" / "x.bin").exists()
    assert sync.deleted == ["a/x.bin", "y.bin"]


@pytest.mark.timeout(60)  # the loop links below used to make the sync walk for ever
def test_sync_sends_regular_files_and_names_each_skipped_entry_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    local = tmp_path / "host" / "checkpoints"
    (local / "step-3").mkdir(parents=True)
    (local / "step-3" / "w.pt").write_bytes(b"3")
    (local / "latest").symlink_to("/opt/ml/checkpoints/step-3")  # as the job saw its directory
    (local / "a").symlink_to(".")
    (local / "b").symlink_to(".")
    (local / "etc").symlink_to("/etc")
    os.mkfifo(local / "pipe")
    logs: list[str] = []
    sync = DirectorySync(
        TransferEngine(progress=False),
        store.as_uri(),
        {"algo-1": local},
        logs.append,
        deletions=True,
        what="checkpoint directory",
        seen_at="/opt/ml/checkpoints",
    )
    sync.sync(final=True)
    sync.sync(final=True)  # every tick walks again; each entry is named once
    files = {p.relative_to(store).as_posix(): p.read_bytes() for p in store.rglob("*") if p.is_file()}
    assert files == {"latest/w.pt": b"3", "step-3/w.pt": b"3"}
    named = sorted(line.split("skipped ")[1].split(":")[0] for line in logs if "skipped " in line)
    assert named == ["'a'", "'b'", "'etc'", "'pipe'"]
    warnings = [line for line in logs if "skipped" in line]
    assert all(line.startswith("WARNING: checkpoint directory of algo-1: ") for line in warnings)
    (local / "step-3" / "w.pt").unlink()
    os.mkfifo(local / "step-3" / "w.pt")  # no longer a regular file: gone, as a deleted checkpoint
    sync.stop()
    assert not (store / "step-3" / "w.pt").exists()
    assert sync.deleted == ["latest/w.pt", "step-3/w.pt"]


CUSTOM_PATH_SCRIPT = """
import json, os, pathlib
base = pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"])
local = pathlib.Path(json.loads((base / "input/config/checkpointconfig.json").read_text())["LocalPath"])
restored = (local / "seed.txt").read_text()
(local / f"{os.environ['SM_CURRENT_HOST']}.txt").write_text(restored + " and more")
print("LocalPath", local.relative_to(base), flush=True)
"""


@pytest.mark.timeout(120)
def test_a_custom_local_path_under_opt_ml_is_restored_and_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``checkpoint_local_path="/opt/ml/ckpt/run-1"``: each process host has it in its own tree."""
    with moto_s3_server(monkeypatch, "ckpt") as client:
        client.put_object(Bucket="ckpt", Key="custom/seed.txt", Body=b"seed")
        backend = LocalSession(tmp_path / "jobs", s3_client=client).backend()
        assert isinstance(backend, LocalBackend)
        spec = make_spec(tmp_path, "custom-ckpt", CUSTOM_PATH_SCRIPT, instance_count=2).model_copy(
            update={
                "CheckpointConfig": CheckpointConfig(S3Uri="s3://ckpt/custom", LocalPath="/opt/ml/ckpt/run-1")
            }
        )
        try:
            backend.submit(job_request(spec))
            description = wait_terminal(backend, "custom-ckpt", timeout=90)
        finally:
            kill_leftover_jobs(tmp_path / "jobs")
        log = "\n".join(backend.log_lines("custom-ckpt"))
        assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, log
        assert log.count("LocalPath ckpt/run-1") == 2
        keys = client.list_objects_v2(Bucket="ckpt", Prefix="custom/")["Contents"]
        bodies = {o["Key"]: client.get_object(Bucket="ckpt", Key=o["Key"])["Body"].read() for o in keys}
    assert bodies == {
        "custom/seed.txt": b"seed",
        "custom/algo-1.txt": b"seed and more",
        "custom/algo-2.txt": b"seed and more",
    }
