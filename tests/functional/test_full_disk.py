"""A full job store: a small tmpfs mounted by the test (root only), unmounted after.

A run that fills the disk ends Failed with "No space left on device" naming the path, and the job
stays readable (``describe()``, ``attach()``, its log). Skipped with the reason when the test cannot
mount a filesystem.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from estimator import PyTorch
from estimator.backends.local import LocalBackend
from estimator.session import LocalSession
from runtime import contract
from tests.functional._local_helpers import (
    assert_no_job_processes,
    kill_leftover_jobs,
    make_spec,
    wait_terminal,
)

STORE_SIZE = "16m"

# A training script saving a checkpoint bigger than the disk: it dies of ENOSPC.
FILL_THE_DISK = """
import argparse, os
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
print("saving the model", flush=True)
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
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={STORE_SIZE}", "tmpfs", str(store)],
                             capture_output=True, text=True, check=False)
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
    spec = make_spec(tmp_path, "fills-disk", FILL_THE_DISK, instance_count=1)
    backend.submit(spec)
    description = wait_terminal(backend, "fills-disk")
    assert description["TrainingJobStatus"] == contract.STATUS_FAILED
    reason = description["FailureReason"]
    assert reason.startswith("ClientError: No space left on device: "), reason
    assert str(small_store / "jobs" / "fills-disk") in reason.splitlines()[0], reason
    assert_no_job_processes("fills-disk", backend.job_dir("fills-disk").path)
    # The job stays readable: describe, attach, its log; the name stays taken by a Failed job.
    attached = PyTorch.attach("fills-disk", sagemaker_session=session)
    assert attached.latest_training_job is not None
    assert attached.latest_training_job.describe()["TrainingJobStatus"] == contract.STATUS_FAILED
    assert any("saving the model" in line for line in backend.log_lines("fills-disk"))
    assert not (backend.job_dir("fills-disk").path / ".space-reserve").exists()
    with contextlib.suppress(FileNotFoundError):
        assert not list(small_store.glob("jobs/fills-disk/.state.json.*"))  # no half-written state
