"""A full job store: a small tmpfs mounted by the test (root only), unmounted after.

A run that fills the disk ends Failed with "No space left on device" naming the path, and the job
stays readable (``describe()``, ``attach()``, its log). A submit on a full store raises a clean
``NoSpaceLeftError`` naming the path and leaves no job directory (the name stays free); a store with
less room than the job's code warns before the job starts. Skipped with the reason when the test
cannot mount a filesystem.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from smlaunch import PyTorch, UnexpectedStatusException, contract
from smlaunch.sdk.backends.emulated.backend import LocalBackend
from smlaunch.sdk.errors import NoSpaceLeftError
from smlaunch.sdk.sessions.sagemaker import LocalSession
from tests.functional._local_helpers import (
    assert_no_job_processes,
    job_request,
    kill_leftover_jobs,
    make_spec,
    moto_s3_server,
    wait_for_line,
    wait_terminal,
)

STORE_SIZE = "16m"

# A training script saving a checkpoint bigger than the disk: it dies of ENOSPC.
FILL_THE_DISK = """
import argparse, os, time
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--go", type=str)
args = parser.parse_args()
print("saving the model", flush=True)
while not os.path.exists(args.go):  # the test has seen the line in the job's log
    time.sleep(0.05)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.pth"), "wb") as handle:
    for _ in range(1000):
        handle.write(os.urandom(1 << 20))
        handle.flush()
"""


@pytest.fixture
def small_store(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs at ``tmp_path/store``; every job under it is killed before it is unmounted."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs job store needs root on Linux")
    store = tmp_path / "store"
    store.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={STORE_SIZE}", "tmpfs", str(store)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield store
    finally:
        kill_leftover_jobs(store / "jobs")
        subprocess.run(["umount", "-l", str(store)], check=False)


@pytest.mark.slow
def test_a_run_that_fills_the_disk_fails_saying_so(tmp_path: Path, small_store: Path) -> None:
    session = LocalSession(small_store / "jobs")
    backend = session.backend()
    assert isinstance(backend, LocalBackend)
    go = tmp_path / "go"
    spec = make_spec(tmp_path, "fills-disk", FILL_THE_DISK, instance_count=1, hyperparameters={"go": str(go)})
    backend.submit(job_request(spec))
    wait_for_line(backend, "fills-disk", "saving the model")  # what was logged before the disk filled ...
    go.touch()
    description = wait_terminal(backend, "fills-disk")
    assert description["TrainingJobStatus"] == contract.STATUS_FAILED
    reason = description["FailureReason"]
    assert reason.startswith("ClientError: No space left on device: "), reason
    assert str(small_store / "jobs" / "fills-disk") in reason.splitlines()[0], reason
    assert_no_job_processes("fills-disk", backend.job_dir("fills-disk").path)
    # The job stays readable: describe, attach, its log; the name stays taken by a Failed job.
    with pytest.raises(UnexpectedStatusException):  # as the SDK's attach to a Failed job
        PyTorch.attach("fills-disk", sagemaker_session=session)
    attached = PyTorch.attach("fills-disk", sagemaker_session=session, wait=False)
    assert attached.latest_training_job is not None
    assert attached.latest_training_job.describe()["TrainingJobStatus"] == contract.STATUS_FAILED
    assert any("saving the model" in line for line in backend.log_lines("fills-disk"))  # ... stays
    assert not (backend.job_dir("fills-disk").path / ".space-reserve").exists()
    with contextlib.suppress(FileNotFoundError):
        assert not list(small_store.glob("jobs/fills-disk/.state.json.*"))  # no half-written state


def _fill(store: Path, leave: int = 0) -> Path:
    """Fill ``store`` up to ``leave`` bytes of free space with one file; returns it."""
    filler = store / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                room = shutil.disk_usage(store).free - leave
                if room <= 0:
                    break
                handle.write(bytes(min(room, 1 << 20)))
                handle.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC
    return filler


@pytest.mark.slow
def test_fit_on_a_full_disk_leaves_nothing_and_the_name_stays_free(tmp_path: Path, small_store: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('trained', flush=True)\n")
    session = LocalSession(small_store / "jobs")
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        role="arn:aws:iam::000000000000:role/x",
        instance_type="ml.c5.xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        sagemaker_session=session,
    )
    filler = _fill(small_store)
    with pytest.raises(NoSpaceLeftError) as info:
        estimator.fit(job_name="full-submit", wait=False)
    message = str(info.value)
    assert message.startswith(f"No space left on device: {small_store}"), message
    assert "Fix: " in message and isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC
    assert not (small_store / "jobs" / "full-submit").exists()  # no half-made job directory
    # The backend's own first write (the name's claim) on a full store: the same clean error,
    # nothing left (not even the hidden directory the claim is written in).
    backend = session.backend()
    with pytest.raises(NoSpaceLeftError, match=str(small_store / "jobs" / "full-submit-2")):
        backend.submit(job_request(make_spec(tmp_path, "full-submit-2", "print('x')", instance_count=1)))
    assert sorted(p.name for p in (small_store / "jobs").iterdir()) == []
    filler.unlink()
    estimator.fit(job_name="full-submit", wait=False)  # the name was never taken
    description = wait_terminal(backend, "full-submit")
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, description.get("FailureReason")


@pytest.mark.slow
def test_a_store_with_less_room_than_the_code_warns_before_the_job_starts(
    tmp_path: Path, small_store: Path
) -> None:
    backend = LocalSession(small_store / "jobs").backend()
    padding = base64.b64encode(os.urandom(3 << 20)).decode()  # about 3 MiB compressed
    spec = make_spec(tmp_path, "short-of-room", f"# {padding}\nprint('ran')\n", instance_count=1)
    _fill(small_store, leave=1 << 20)
    with pytest.warns(UserWarning, match=r"has [\d.]+ MiB free, less than job short-of-room copies there"):
        backend.submit(job_request(spec))
    description = wait_terminal(backend, "short-of-room")
    assert description["TrainingJobStatus"] == contract.STATUS_FAILED
    assert description["FailureReason"].startswith("ClientError: No space left on device: "), description


@pytest.mark.slow
def test_s3_inputs_larger_than_the_store_warn_and_fail_the_download_saying_so(
    tmp_path: Path, small_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with moto_s3_server(monkeypatch, "data") as s3:
        s3.put_object(Bucket="data", Key="train/part-0.bin", Body=os.urandom(20 << 20))  # > the store
        backend = LocalSession(small_store / "jobs", s3_client=s3).backend()
        spec = make_spec(
            tmp_path, "big-input", "print('ran')", instance_count=1, inputs={"train": "s3://data/train/"}
        )
        with pytest.warns(UserWarning, match=r"s3:// inputs 20\.0 MiB"):
            backend.submit(job_request(spec))
        description = wait_terminal(backend, "big-input")
    assert description["TrainingJobStatus"] == contract.STATUS_FAILED
    reason = description["FailureReason"]
    job_dir = small_store / "jobs" / "big-input"
    assert reason.startswith(f"ClientError: No space left on device: {job_dir}/"), reason
